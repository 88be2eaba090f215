"""What a library's source distribution declares it needs: runtime requirements and test requirements.

Read from its files alone, never by running anything: pyproject.toml ([project] dependencies,
optional-dependencies, dependency-groups), setup.cfg ([options] install_requires, tests_require,
extras_require), setup.py (the literal arguments of its setup() call, read with `ast`), requirement
files (requirements*.txt, requirements/*.txt, *-requirements.txt, following -r) and tox.ini's
[testenv] (deps and extras). Extras and requirement files count as test requirements when their
names say test or dev; docs, lint and release ones are left out. Lines that are not requirements
of an index (editable installs, local paths, URLs, the library itself, options) are dropped with
their reason.
"""
from __future__ import annotations

import ast
import configparser
import posixpath
import re
import tomllib
from dataclasses import dataclass, field

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from flawforge.debugging.syntax import parse

# Extras, dependency groups and requirement files whose names hold one of these words are the tests'.
TEST_WORDS = frozenset({"test", "tests", "testing", "dev", "develop", "development"})
# ... unless they also hold one of these: what they install documents, lints or releases the library.
OTHER_WORDS = frozenset({"doc", "docs", "lint", "linting", "style", "typing", "mypy", "release", "publish",
                         "deploy", "build", "ci", "bench", "benchmark", "benchmarks"})
# Folders of tests whose requirement files are the tests' (tests/requirements.txt).
TEST_FOLDERS = frozenset({"test", "tests", "testing"})
# Requirement files whose whole stem says they are the library's runtime requirements.
RUNTIME_STEMS = frozenset({"requirements", "base", "install", "runtime", "main"})


@dataclass(frozen=True)
class Declared:
    """A library's declared requirements, each normalised by packaging (e.g. 'pytest>=3.0; python_version >= "3.6"'),
    sorted by name; `dropped` holds (line, why) for what was read but is not a requirement of an index; `names`
    are the library's own (canonical) names, which its environment must not install."""

    runtime: tuple[str, ...]
    test: tuple[str, ...]
    dropped: tuple[tuple[str, str], ...]
    names: tuple[str, ...] = ()

    @property
    def requirements(self) -> tuple[str, ...]:
        return self.runtime + self.test


@dataclass
class Found:
    """What one file declares: runtime and test lines, every extra by name, extras it asks for by name, and the
    library's own names it gives."""

    runtime: list[str] = field(default_factory=list)
    test: list[str] = field(default_factory=list)
    extras: dict[str, list[str]] = field(default_factory=dict)
    wanted_extras: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)
    dropped: list[tuple[str, str]] = field(default_factory=list)


def _words(name: str) -> set[str]:
    return set(re.split(r"[^a-z0-9]+", name.lower())) - {""}


def is_test_name(name: str) -> bool:
    """An extra, group or requirement file for the tests (by its name)."""
    words = _words(name)
    return bool(words & TEST_WORDS) and not words & OTHER_WORDS


def _lines(text: str) -> list[str]:
    """A requirement list's entries: comments and blank lines out, backslash continuations joined."""
    joined = re.sub(r"\\\r?\n", " ", text)
    entries = []
    for line in joined.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            entries.append(line)
    return entries


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


class PyprojectReader:
    """pyproject.toml: [project] name, dependencies, optional-dependencies; [dependency-groups]."""

    def read(self, files: dict[str, bytes], found: Found) -> None:
        data = files.get("pyproject.toml")
        if data is None:
            return
        try:
            document = tomllib.loads(_text(data))
        except tomllib.TOMLDecodeError as exc:
            found.dropped.append(("pyproject.toml", f"not valid TOML: {exc}"))
            return
        project = document.get("project") or {}
        if isinstance(project.get("name"), str):
            found.names.add(project["name"])
        found.runtime += [line for line in project.get("dependencies") or [] if isinstance(line, str)]
        for extra, lines in (project.get("optional-dependencies") or {}).items():
            found.extras[extra] = [line for line in lines or [] if isinstance(line, str)]
        groups = document.get("dependency-groups") or {}
        for group in groups:
            if is_test_name(group):
                found.test += self._group(groups, group, set())

    def _group(self, groups: dict, name: str, seen: set) -> list[str]:
        """A dependency group's requirements, with the groups it includes."""
        if name in seen:
            return []
        seen.add(name)
        lines = []
        for entry in groups.get(name) or []:
            if isinstance(entry, str):
                lines.append(entry)
            elif isinstance(entry, dict) and isinstance(entry.get("include-group"), str):
                lines += self._group(groups, entry["include-group"], seen)
        return lines


def _ini(files: dict[str, bytes], path: str, found: Found) -> configparser.ConfigParser | None:
    """The INI file at `path`, parsed; None when there is none or it does not parse (then dropped, with why)."""
    data = files.get(path)
    if data is None:
        return None
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(_text(data))
    except configparser.Error as exc:
        found.dropped.append((path, f"not readable: {type(exc).__name__}"))
        return None
    return parser


class SetupCfgReader:
    """setup.cfg: [metadata] name, [options] install_requires and tests_require, [options.extras_require]."""

    def read(self, files: dict[str, bytes], found: Found) -> None:
        parser = _ini(files, "setup.cfg", found)
        if parser is None:
            return
        if parser.has_option("metadata", "name"):
            found.names.add(parser.get("metadata", "name").strip())
        if parser.has_option("options", "install_requires"):
            found.runtime += _lines(parser.get("options", "install_requires"))
        if parser.has_option("options", "tests_require"):
            found.test += _lines(parser.get("options", "tests_require"))
        if parser.has_section("options.extras_require"):
            for extra, value in parser.items("options.extras_require"):
                found.extras.setdefault(extra, []).extend(_extra_lines(extra, _lines(value)))


def _extra_lines(key: str, lines: list[str]) -> list[str]:
    """setuptools' 'name:marker' extra keys: the marker goes onto each of its requirements."""
    _, _, marker = key.partition(":")
    if not marker.strip():
        return lines
    return [f"{line} and ({marker.strip()})" if ";" in line else f"{line}; {marker.strip()}" for line in lines]


class SetupPyReader:
    """setup.py: the setup() call's name, install_requires, tests_require and extras_require, where they are
    literals or names the module assigns a literal to (the file is parsed, never run)."""

    KEYWORDS = ("name", "install_requires", "tests_require", "extras_require")

    def read(self, files: dict[str, bytes], found: Found) -> None:
        data = files.get("setup.py")
        if data is None:
            return
        try:
            tree = parse(_text(data), "setup.py")
        except (SyntaxError, ValueError) as exc:
            found.dropped.append(("setup.py", f"does not parse: {exc}"))
            return
        assigned = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                assigned[node.targets[0].id] = node.value
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call) and _called(n) == "setup"):
            for keyword in call.keywords:
                if keyword.arg not in self.KEYWORDS:
                    continue
                value = assigned.get(keyword.value.id, keyword.value) if isinstance(keyword.value, ast.Name) \
                    else keyword.value
                try:
                    literal = ast.literal_eval(value)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    found.dropped.append((f"setup.py {keyword.arg}", "computed, not a literal"))
                    continue
                self._take(keyword.arg, literal, found)

    @staticmethod
    def _take(keyword: str, literal, found: Found) -> None:
        if keyword == "name":
            if isinstance(literal, str):
                found.names.add(literal)
        elif keyword == "extras_require":
            for extra, lines in (literal.items() if isinstance(literal, dict) else ()):
                lines = _lines(lines) if isinstance(lines, str) else [l for l in lines if isinstance(l, str)]
                found.extras.setdefault(str(extra), []).extend(_extra_lines(str(extra), lines))
        else:
            lines = _lines(literal) if isinstance(literal, str) else \
                [line for line in literal if isinstance(line, str)] if isinstance(literal, (list, tuple)) else []
            (found.runtime if keyword == "install_requires" else found.test).extend(lines)


def _called(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


class RequirementFileReader:
    """Requirement files: requirements*.txt, *-requirements.txt and *_requirements.txt at the top, and the .txt
    files of requirements/; by name, the runtime's (requirements.txt) or the tests' (requirements-dev.txt,
    test-requirements.txt, requirements/tests.txt); in a test folder (tests/requirements.txt), the tests';
    `-r` followed, `-c`, `-e` and other options dropped."""

    def read(self, files: dict[str, bytes], found: Found) -> None:
        for path in sorted(files):
            kind = self.kind_of(path)
            if kind is not None:
                lines = (found.runtime if kind == "runtime" else found.test)
                lines += read_requirement_file(files, path, found, set())

    @staticmethod
    def kind_of(path: str) -> str | None:
        """'runtime', 'test', or None for a file that is not a requirement file or installs other things."""
        folder, _, base = path.rpartition("/")
        stem = base[:-len(".txt")].lower()
        if base.endswith(".txt") and folder in TEST_FOLDERS and "requirements" in _words(stem) \
                and not _words(stem) & OTHER_WORDS:
            return "test"
        if not base.endswith(".txt") or folder not in ("", "requirements"):
            return None
        if folder == "" and "requirements" not in _words(stem):
            return None
        if is_test_name(stem):
            return "test"
        if stem in RUNTIME_STEMS and not _words(stem) & OTHER_WORDS:
            return "runtime"
        return None


def read_requirement_file(files: dict[str, bytes], path: str, found: Found, seen: set[str]) -> list[str]:
    """The requirement lines of one requirement file and the files it names with -r, once each."""
    if path in seen:
        return []
    seen.add(path)
    data = files.get(path)
    if data is None:
        found.dropped.append((path, "named with -r but not in the archive"))
        return []
    return requirement_lines(files, _lines(_text(data)), posixpath.dirname(path), found, seen)


def requirement_lines(files: dict[str, bytes], entries: list[str], folder: str, found: Found,
                      seen: set[str]) -> list[str]:
    """The requirements among a requirement list's entries, -r files read (relative to `folder`), options and
    editable installs dropped; `.` and `.[extras]` (the library itself) ask for those extras."""
    lines = []
    for entry in entries:
        option = re.match(r"^(-r|--requirement)\s*=?\s*(\S+)$", entry)
        if option:
            target = option.group(2).replace("{toxinidir}/", "")
            lines += read_requirement_file(files, posixpath.normpath(posixpath.join(folder, target)), found, seen)
            continue
        itself = re.match(r"^(-e\s+|--editable\s+)?\.(\[([^\]]*)\])?$", entry)
        if itself:
            found.wanted_extras.update(e.strip() for e in (itself.group(3) or "").split(",") if e.strip())
            found.dropped.append((entry, "the library itself"))
        elif entry.startswith(("-e", "--editable")):
            found.dropped.append((entry, "an editable install"))
        elif entry.startswith("-"):
            found.dropped.append((entry, "an option, not a requirement"))
        else:
            lines.append(entry)
    return lines


class ToxReader:
    """tox.ini's [testenv]: its deps (as a requirement list; factor-conditional lines and substitutions dropped)
    and its extras (the library's extras the tests install)."""

    def read(self, files: dict[str, bytes], found: Found) -> None:
        parser = _ini(files, "tox.ini", found)
        if parser is None or not parser.has_section("testenv"):
            return
        if parser.has_option("testenv", "extras"):
            found.wanted_extras.update(e.strip() for e in re.split(r"[,\s]+", parser.get("testenv", "extras"))
                                       if e.strip())
        if parser.has_option("testenv", "deps"):
            entries = []
            for entry in _lines(parser.get("testenv", "deps")):
                if "{" in entry.replace("{toxinidir}/", ""):
                    found.dropped.append((entry, "a tox substitution"))
                elif re.match(r"^[\w,{}.-]+:\s", entry) and not entry.startswith(("-r", "-c")):
                    found.dropped.append((entry, "a tox factor's line"))
                else:
                    entries.append(entry)
            found.test += requirement_lines(files, entries, "", found, set())


READERS = (PyprojectReader(), SetupCfgReader(), SetupPyReader(), RequirementFileReader(), ToxReader())


def _project_names(files: dict[str, bytes]) -> set[str]:
    """The name PKG-INFO gives, if any."""
    match = re.search(rb"^Name:\s*(\S+)", files.get("PKG-INFO", b""), re.M)
    return {match.group(1).decode("utf-8", "replace")} if match else set()


def declared_requirements(files: dict[str, bytes], name: str | None = None) -> Declared:
    """What the library in `files` (project-relative path -> bytes, as layout.read_archive gives) declares;
    `name` (e.g. from the archive's name) is one of its own names, which no requirement may name."""
    found = Found()
    for reader in READERS:
        reader.read(files, found)
    names = {canonicalize_name(n) for n in found.names | _project_names(files) | ({name} if name else set())}
    wanted = {extra for extra in found.extras if is_test_name(extra.partition(":")[0])} | found.wanted_extras
    test, taken = list(found.test), set()
    while wanted - taken:  # an extra may ask for others by naming the library itself ("lib[test,yaml]")
        extra = min(wanted - taken)
        taken.add(extra)
        test += found.extras.get(extra, [])
        wanted |= _own_extras(found.extras.get(extra, []), names)
    dropped = list(found.dropped)
    runtime = _parsed(found.runtime, names, dropped)
    test = [line for line in _parsed(test, names, dropped) if line not in runtime]
    return Declared(runtime=tuple(_sorted(runtime)), test=tuple(_sorted(test)), dropped=tuple(dropped),
                    names=tuple(sorted(names)))


def _own_extras(lines: list[str], names: set[str]) -> set[str]:
    """The extras that lines naming the library itself ask for."""
    extras = set()
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) in names:
            extras |= requirement.extras
    return extras


def _parsed(lines: list[str], names: set[str], dropped: list) -> list[str]:
    """Each line as packaging normalises it, once; lines naming the library itself or a URL, or not
    requirements, go to `dropped` with why."""
    parsed = []
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            dropped.append((line, f"not a requirement: {str(exc).splitlines()[0]}"))
            continue
        if canonicalize_name(requirement.name) in names:
            dropped.append((line, "the library itself"))
        elif requirement.url:
            dropped.append((line, "a direct URL, not a requirement of an index"))
        elif str(requirement) not in parsed:
            parsed.append(str(requirement))
    return parsed


def _sorted(lines: list[str]) -> list[str]:
    return sorted(lines, key=lambda line: (canonicalize_name(Requirement(line).name), line))
