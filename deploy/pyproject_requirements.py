"""Prints the requirements of the project plus the given extras, one per line.

The image build installs these before copying the source, so a code change does not
reinstall heavy dependencies (torch).
"""
from __future__ import annotations

import sys
import tomllib

USAGE = "usage: python pyproject_requirements.py PYPROJECT [EXTRA,EXTRA...]"

def requirements(pyproject: dict, extras: list[str]) -> list[str]:
    project = pyproject["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(f"unknown extra(s) {', '.join(unknown)}; pyproject.toml defines: {', '.join(optional)}")
    return list(project["dependencies"]) + [dep for extra in extras for dep in optional[extra]]


def main(argv: list[str]) -> None:
    if len(argv) not in (1, 2):
        raise SystemExit(USAGE)
    with open(argv[0], "rb") as f:
        pyproject = tomllib.load(f)
    extras = [e.strip() for e in (argv[1] if len(argv) == 2 else "").split(",") if e.strip()]
    print("\n".join(requirements(pyproject, extras)))


if __name__ == "__main__":
    main(sys.argv[1:])
