"""Named environments for libraries' test suites: what a library declares, resolved as wheels and installed once.

A library's declared requirements (flawforge.debugging.requirements) are resolved by pip on the host
(`install --dry-run --only-binary :all: --report`: nothing is built or run), together with the suite
toolchain pinned to the versions the sandbox's own pytest has (pytest and what it needs, as installed
here: the modules a suite sandbox's zygote preloads are the very same). A requirement that has no wheel
or conflicts with the toolchain is left out, as an Exclusion. The resolved `name==version` list names
the environment (Environment.key); it is installed once, with `pip install --no-deps --target`, into
<folder>/<key> (built in <key>.tmp, then renamed; a lock file keeps two builders apart), and a suite
unit given that folder sees the standard library, the project and it, nothing else. Resolutions are
cached too (by the requirements, the toolchain, the Python and the index options), so a library seen
before needs no network.

The folder (FLAWFORGE_DEBUG_ENVIRONMENTS) must be readable by the sandbox's units: suite sandboxes
add it to their read paths. On a stack the trace-executor mounts the same volume at the same path,
read-only (docs/deployment.md).
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from flawforge.debugging.requirements import Declared, declared_requirements
from flawforge.debugging.rewrites import plugins_rewritten, rewrite_plugins
from flawforge.errors import Unavailable
from flawforge.proto.debugging import Environment, Exclusion
from flawforge.sandbox.suites import environments_folder
from flawforge.settings import Settings

# What the sandbox's suite units import from the host: pytest, and with it what it requires.
TOOLCHAIN = "pytest"
PIP_TIMEOUT_S = 900
RECORD = "flawforge-environment.json"  # in each environment's folder: what it holds
# pip's words for an index it could not reach (rather than a requirement it could not satisfy).
NETWORK_TROUBLE = re.compile(r"NewConnectionError|Max retries exceeded|Temporary failure in name resolution|"
                             r"Name or service not known|ConnectTimeout|ReadTimeout|ProxyError|SSLError|"
                             r"Network is unreachable|Connection refused")


class EnvironmentUnavailable(Unavailable):
    """An environment could not be resolved or installed for a reason that is not the library's (no network, no
    pip, a full disk); the message names it."""

    code = "environment_unavailable"


@dataclass(frozen=True)
class BuiltEnvironment:
    """An installed environment: what it holds, its folder (a suite unit's `environment`), and the library's
    requirements left out of it, with why."""

    environment: Environment
    path: str
    excluded: list[Exclusion]


def toolchain_pins() -> list[str]:
    """pytest and every distribution it requires (here, on this Python), as installed: name==version, sorted."""
    pins, pending = {}, [TOOLCHAIN]
    environment = {**default_environment(), "extra": ""}
    while pending:
        name = canonicalize_name(pending.pop())
        if name in pins:
            continue
        distribution = importlib.metadata.distribution(name)
        pins[name] = f"{name}=={distribution.version}"
        for line in distribution.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate(environment):
                pending.append(requirement.name)
    return sorted(pins.values())


def applicable(declared: Declared) -> list[str]:
    """The declared requirements whose markers hold on this Python (the others do not apply here), once each."""
    chosen = []
    for line in declared.requirements:
        marker = Requirement(line).marker
        if (marker is None or marker.evaluate({**default_environment(), "extra": ""})) and line not in chosen:
            chosen.append(line)
    return chosen


@dataclass(frozen=True)
class Unresolvable:
    """pip could not resolve a set of requirements: its own error line."""

    reason: str

    @property
    def missing(self) -> str | None:
        """The distribution pip found no wheel for, if that is what it says (canonical name)."""
        match = re.search(r"satisfies the requirement ([A-Za-z0-9._-]+)", self.reason)
        return canonicalize_name(match.group(1)) if match else None


class Pip:
    """pip of this interpreter, with the index options of the settings (besides pip's own configuration)."""

    def __init__(self, index_options: list[str]):
        self.index_options = index_options

    @classmethod
    def from_settings(cls, settings: Settings) -> "Pip":
        options = ["--index-url", settings.debug_pip_index_url] if settings.debug_pip_index_url else []
        for link in (part.strip() for part in settings.debug_pip_find_links.split(",")):
            if link:
                options += ["--find-links", link]
        return cls(options)

    def resolve(self, requirements: list[str]) -> list[str] | Unresolvable:
        """Every distribution pip would install for `requirements`, all wheels, as name==version sorted; or why
        not. Nothing is downloaded but metadata, nothing is built or run."""
        with tempfile.TemporaryDirectory(prefix="flawforge-resolve-") as scratch:
            report = os.path.join(scratch, "report.json")
            failed = self._run(["install", "--dry-run", "--ignore-installed", "--only-binary", ":all:",
                                "--report", report, *requirements])
            if failed is not None:
                return failed
            with open(report, encoding="utf-8") as source:
                installed = json.load(source)["install"]
        return sorted(f"{canonicalize_name(item['metadata']['name'])}=={item['metadata']['version']}"
                      for item in installed)

    def install(self, packages: list[str], target: str) -> None:
        """Exactly `packages` (name==version), as wheels, into the folder `target`."""
        failed = self._run(["install", "--no-deps", "--ignore-installed", "--only-binary", ":all:",
                            "--target", target, *packages])
        if failed is not None:
            raise EnvironmentUnavailable(f"installing an environment failed: {failed.reason}")

    def _run(self, arguments: list[str]) -> Unresolvable | None:
        command = [sys.executable, "-m", "pip", "--quiet", "--disable-pip-version-check", "--no-input",
                   *arguments[:1], *self.index_options, *arguments[1:]]
        try:
            done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=PIP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise EnvironmentUnavailable(f"pip did not finish in {PIP_TIMEOUT_S} s") from None
        except OSError as exc:
            raise EnvironmentUnavailable(f"pip did not start: {exc}") from None
        if done.returncode == 0:
            return None
        if NETWORK_TROUBLE.search(done.stderr):
            raise EnvironmentUnavailable(f"pip could not reach its package index: {_error_line(done.stderr)}")
        return Unresolvable(_error_line(done.stderr))


def _error_line(stderr: str) -> str:
    """pip's first ERROR line (or its last line), without the prefix."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    chosen = next((line for line in lines if line.startswith("ERROR:")), lines[-1] if lines else "pip failed")
    return chosen.removeprefix("ERROR:").strip()[:500]


class EnvironmentBuilder:
    """Resolves and installs libraries' environments into `folder`, each once."""

    def __init__(self, folder: str, pip: Pip):
        self.folder = os.path.abspath(folder)
        self.pip = pip
        self.python = platform.python_version()
        self.toolchain = toolchain_pins()

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> "EnvironmentBuilder":
        settings = settings or Settings()
        return cls(environments_folder(settings), Pip.from_settings(settings))

    def for_library(self, files: dict[str, bytes], name: str | None = None) -> BuiltEnvironment:
        """The environment of the library in `files` (as layout.read_archive gives them; `name`: its name)."""
        return self.for_requirements(declared_requirements(files, name))

    def for_requirements(self, declared: Declared) -> BuiltEnvironment:
        environment, excluded = self.resolve(declared)
        return BuiltEnvironment(environment, self.install(environment), excluded)

    # --- resolution -------------------------------------------------------------------------------
    def resolve(self, declared: Declared) -> tuple[Environment, list[Exclusion]]:
        """The environment of the declared requirements that resolve as wheels beside the toolchain, and the
        exclusions of the others (cached: a second call with the same requirements asks pip nothing)."""
        wanted = applicable(declared)
        identity = json.dumps({"python": self.python, "toolchain": self.toolchain, "requirements": sorted(wanted),
                               "library": declared.names, "index": self.pip.index_options}, sort_keys=True)
        cached = os.path.join(self.folder, "resolutions", hashlib.sha256(identity.encode()).hexdigest()[:24] + ".json")
        try:
            with open(cached, encoding="utf-8") as source:
                record = json.load(source)
            return (Environment(python=self.python, packages=record["packages"]),
                    [Exclusion.model_validate(item) for item in record["excluded"]])
        except (OSError, ValueError, KeyError):
            pass
        packages, excluded = self._resolve(wanted)
        itself = [package for package in packages if package.partition("==")[0] in declared.names]
        packages = [package for package in packages if package not in itself]
        excluded += [Exclusion(kind="requirement", name=package, reason="the library itself, which another "
                               "requirement needs: the tests use its own source") for package in itself]
        _write_atomically(cached, json.dumps({"packages": packages,
                                              "excluded": [item.model_dump() for item in excluded]}, indent=1))
        return Environment(python=self.python, packages=packages), excluded

    def _resolve(self, wanted: list[str]) -> tuple[list[str], list[Exclusion]]:
        """All of `wanted` at once, less each one pip names as having no wheel; when pip names none (a conflict,
        or a dependency without a wheel), the toolchain alone (which must resolve), then each requirement added
        in turn, kept when the set still resolves."""
        excluded = []
        while True:
            resolved = self.pip.resolve(self.toolchain + wanted)
            if not isinstance(resolved, Unresolvable):
                return resolved, excluded
            named = [line for line in wanted if canonicalize_name(Requirement(line).name) == resolved.missing]
            if not named:
                break
            excluded += [Exclusion(kind="requirement", name=line, reason=resolved.reason) for line in named]
            wanted = [line for line in wanted if line not in named]
        kept = []
        resolved = self.pip.resolve(self.toolchain)
        if isinstance(resolved, Unresolvable):
            raise EnvironmentUnavailable(f"the suite toolchain ({', '.join(self.toolchain)}) does not resolve as "
                                         f"wheels: {resolved.reason}")
        for requirement in wanted:
            attempt = self.pip.resolve(self.toolchain + kept + [requirement])
            if isinstance(attempt, Unresolvable):
                excluded.append(Exclusion(kind="requirement", name=requirement, reason=attempt.reason))
            else:
                kept.append(requirement)
                resolved = attempt
        return resolved, excluded

    # --- installation -----------------------------------------------------------------------------
    def path_of(self, environment: Environment) -> str:
        return os.path.join(self.folder, environment.key)

    def install(self, environment: Environment) -> str:
        """The environment's folder, installed now unless it already is (another process building it meanwhile
        is waited for)."""
        path = self.path_of(environment)
        if os.path.isdir(path) and plugins_rewritten(path):
            return path
        os.makedirs(self.folder, exist_ok=True)
        with open(path + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if os.path.isdir(path):
                rewrite_plugins(path)  # an environment built before its plugins' modules were
                return path
            building = path + ".tmp"
            shutil.rmtree(building, ignore_errors=True)  # what a builder that died left
            self.pip.install(environment.packages, building)
            with open(os.path.join(building, RECORD), "w", encoding="utf-8") as record:
                record.write(environment.model_dump_json(indent=1))
            rewrite_plugins(building)
            _readable_by_all(building)
            os.rename(building, path)
        return path


def _readable_by_all(folder: str) -> None:
    """Units may run as other users: every file readable, every folder searchable, nothing writable but by us."""
    for root, folders, files in os.walk(folder):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)


def _write_atomically(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    scratch = f"{path}.{os.getpid()}.tmp"
    with open(scratch, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(scratch, path)
