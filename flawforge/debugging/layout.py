"""Where a project's importable code and its tests are, from its file list alone.

Tests are the folders named tests, test or testing (at the top or inside the package) and
top-level test_*.py / *_test.py files; pytest is pointed at them (not at the whole project,
whose benchmarks or docs may need more than the project). The library is every other
.py file under the source root (`src/` when there is one), minus build scripts.
"""
from __future__ import annotations

from dataclasses import dataclass

from flawforge.errors import FlawforgeError, InvalidInput
from flawforge.sandbox.runtime.archive import ArchiveRefused, folders_above, project_members

TEST_FOLDERS = ("tests", "test", "testing")
NOT_LIBRARY = ("setup.py", "conftest.py", "noxfile.py", "fabfile.py")
NOT_LIBRARY_FOLDERS = ("docs", "doc", "benchmarks", "benchmark", "examples", "example", "scripts", "tools", "build")


@dataclass(frozen=True)
class ProjectLayout:
    name: str
    version: str
    source_roots: tuple[str, ...]   # put on sys.path ('' is the project root)
    test_paths: tuple[str, ...]     # pytest's arguments
    modules: tuple[str, ...]        # library files, project-relative


def _is_test_file(path: str) -> bool:
    base = path.rsplit("/", 1)[-1]
    return base.startswith("test_") or base.endswith("_test.py") or base == "conftest.py"


def layout_of(name: str, version: str, files: list[str]) -> ProjectLayout:
    """`files`: project-relative paths (the archive's top folder stripped)."""
    py = sorted(f for f in files if f.endswith(".py"))
    source_root = "src" if any(f.startswith("src/") for f in py) else ""
    tests: set[str] = set()
    for path in py:
        parts = path.split("/")
        for depth, part in enumerate(parts[:-1]):
            if part in TEST_FOLDERS:
                tests.add("/".join(parts[:depth + 1]))
                break
        else:
            if len(parts) == 1 and _is_test_file(path):
                tests.add(path)
    # A test folder inside another one is covered by it (looked up folder by folder: linear in the files).
    test_paths = tuple(sorted(t for t in tests if not any(f in tests for f in folders_above(t))))
    if not test_paths:
        raise FlawforgeError(f"{name} {version}: no tests found (no tests/ or test/ folder, no test_*.py)")
    modules = []
    for path in py:
        parts = path.split("/")
        if path in tests or any(f in tests for f in folders_above(path)) or _is_test_file(path):
            continue
        if parts[-1] in NOT_LIBRARY or parts[0] in NOT_LIBRARY_FOLDERS or parts[-1].startswith("_version"):
            continue
        if source_root and parts[0] != source_root:
            continue
        modules.append(path)
    if not modules:
        raise FlawforgeError(f"{name} {version}: no library modules found")
    return ProjectLayout(name, version, (source_root,), test_paths, tuple(modules))


class UnusableArchive(InvalidInput):
    code = "unusable_archive"


def read_archive(data: bytes) -> dict[str, bytes]:
    """The regular files of an sdist, by project-relative path (its single top folder stripped), read as the
    sandbox reads them: links, sparse files, names leaving the project and archives over the bounds are refused
    (UnusableArchive naming the member and the rule) before any content is read."""
    try:
        return dict(project_members(data))
    except ArchiveRefused as exc:
        raise UnusableArchive(str(exc)) from None


def name_and_version(archive_name: str) -> tuple[str, str]:
    """'toolz-1.2.0.tar.gz' -> ('toolz', '1.2.0')."""
    stem = archive_name.rsplit("/", 1)[-1]
    for suffix in (".tar.gz", ".tgz", ".tar"):
        if stem.endswith(suffix):
            stem = stem[:-len(suffix)]
            break
    name, _, version = stem.rpartition("-")
    if not name or not version or not version[0].isdigit():
        raise FlawforgeError(f"{archive_name}: expected <name>-<version>.tar.gz")
    return name, version
