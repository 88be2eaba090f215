"""Every `pip install` of deploy/Dockerfile resolves to wheels for the image's platform.

Nothing is built (no Docker here): each install line is read from the Dockerfile, its
requirements computed as the build computes them (deploy/pyproject_requirements.py with the
image's build arguments from docker-compose.yml and deploy/compose.gpu.yaml), and resolved by a
dry run for the target platform with sources refused (`uv pip compile --no-build`, pip's
`--only-binary :all:`) against the registry the line names. Only metadata is fetched; a
resolution that passed is remembered in pytest's cache under a key of everything it depends on.
"""
from __future__ import annotations

import hashlib
import os
import re
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from test_deploy_files import CPU_TORCH_INDEX, REPO, build_args, image_recipes

pytestmark = pytest.mark.slow

PYPI = "https://pypi.org/simple"
# glibc of the base image's Debian release: the newest manylinux tag its wheels may carry.
GLIBC = {"bookworm": "2_36", "trixie": "2_41"}
INSTALL = re.compile(r"pip install (?P<args>.*?)(?:$|&&|;|\|\|)")


def logical_lines(text: str) -> list[str]:
    return [line.strip() for line in text.replace("\\\n", " ").splitlines() if line.strip() and not line.startswith("#")]


def dockerfile_installs() -> list[str]:
    """The argument strings of every `pip install` the Dockerfile runs."""
    lines = logical_lines((REPO / "deploy" / "Dockerfile").read_text())
    return [m.group("args").strip() for line in lines if line.startswith("RUN") for m in INSTALL.finditer(line)]


def target_platform() -> tuple[str, str]:
    """(python version, uv platform) of the Dockerfile's base image."""
    text = (REPO / "deploy" / "Dockerfile").read_text()
    image = re.search(r"^ARG PYTHON_IMAGE=python:(\d+\.\d+)-slim-(\w+)$", text, re.M)
    assert image, "the base image is not python:X.Y-slim-<debian release>: teach this test its platform"
    assert image.group(2) in GLIBC, f"unknown Debian release {image.group(2)}"
    return image.group(1), f"x86_64-manylinux_{GLIBC[image.group(2)]}"


def reachable(url: str) -> bool:
    try:
        socket.getaddrinfo(urlsplit(url).hostname, 443)
        return True
    except OSError:
        return False


def local_mirror(requirements: list[str]) -> str | None:
    """A find-links folder configured for pip on this machine that holds every pinned wheel."""
    for folder in os.environ.get("PIP_FIND_LINKS", "").split():
        if all(list(Path(folder).glob("{}-{}-*.whl".format(*r.split("=="))) for r in requirements)):
            return folder
    return None


def install_steps() -> list[tuple[str, list[str], str, bool]]:
    """(label, requirements, index, without dependencies) for every image and every pip install line."""
    sys.path.insert(0, str(REPO / "deploy"))
    try:
        from pyproject_requirements import requirements
    finally:
        sys.path.remove(str(REPO / "deploy"))
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    gpu = yaml.safe_load((REPO / "deploy" / "compose.gpu.yaml").read_text())
    steps, seen = [], set()
    for name, service, on_gpu in image_recipes(compose, gpu):
        extras, torch_index = build_args(service)
        torch = requirements(pyproject, sorted(extras), "torch")
        for args in dockerfile_installs():
            if args.endswith("/src"):
                assert "--no-deps" in args, "the project itself installs without dependencies (they came first)"
                continue
            assert "--only-binary :all:" in args, f"Dockerfile: pip install {args} may compile from source"
            part = re.search(r"-r (\S+)\.txt", args)
            assert part and part.group(1) in ("torch", "deps", "no-deps"), f"this test cannot read: pip install {args}"
            reqs = requirements(pyproject, sorted(extras), part.group(1))
            index = PYPI
            if part.group(1) == "torch":
                assert '${TORCH_INDEX:+--index-url "$TORCH_INDEX"}' in args
                index = torch_index or PYPI
            elif part.group(1) == "deps":
                reqs = reqs + torch  # installed by the step before: the rest must agree with it
            key = (tuple(reqs), index, "--no-deps" in args)
            if reqs and key not in seen:
                seen.add(key)
                label = f"{service['image']}:{part.group(1)}" + (" (gpu)" if on_gpu else "")
                steps.append((label, reqs, index, "--no-deps" in args))
    return steps


STEPS = install_steps()


def test_every_install_step_of_every_image_is_resolved():
    parts = {label.split(":")[-1].split()[0] for label, *_ in STEPS}
    assert parts == {"torch", "deps", "no-deps"}
    assert any(label.endswith("(gpu)") for label, *_ in STEPS), "the GPU image's installs are not resolved"


@pytest.mark.parametrize("label,reqs,index,no_deps", STEPS, ids=[s[0] for s in STEPS])
def test_pip_install_resolves_to_wheels_for_the_image(label, reqs, index, no_deps, tmp_path, request):
    from uv import find_uv_bin

    python, platform = target_platform()
    find_links = []
    if not reachable(index):
        # The CPU index serves torch as `X+cpu`; a pip find-links folder of this machine holding that wheel
        # (a mirror of the index) stands in for it.
        assert index == CPU_TORCH_INDEX, f"{label}: {index} is unreachable"
        reqs = [f"{r}+cpu" for r in reqs]
        mirror = local_mirror(reqs)
        if mirror is None:
            pytest.skip(f"{index} is unreachable and no local find-links folder holds {reqs}")
        index, find_links = PYPI, ["--find-links", mirror]
    command = [find_uv_bin(), "pip", "compile", "--no-config", "--no-build", "--quiet", "--index-url", index,
               *find_links, "--python-version", python, "--python-platform", platform,
               *(["--no-deps"] if no_deps else []), "-o", str(tmp_path / "resolved.txt"), str(tmp_path / "in.txt")]
    key = "flawforge/resolve/" + hashlib.sha256(repr((command[2:-4], reqs)).encode()).hexdigest()[:24]
    if request.config.cache.get(key, False):
        return
    (tmp_path / "in.txt").write_text("\n".join(reqs) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
    assert result.returncode == 0, f"{label}: does not resolve to wheels for {platform}:\n{result.stderr[-3000:]}"
    resolved = (tmp_path / "resolved.txt").read_text()
    for requirement in reqs:
        name = re.match(r"[\w.-]+", requirement).group(0).lower().replace("_", "-")
        assert re.search(rf"^{re.escape(name)}==", resolved, re.M | re.I), f"{label}: {name} missing from {resolved}"
    request.config.cache.set(key, True)
