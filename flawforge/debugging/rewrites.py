"""pytest's rewritten modules, made once on the host instead of in every suite unit.

pytest rewrites the assert statements of test modules, conftest files and its plugins' modules as it imports them,
and keeps the result beside the source (__pycache__/<name>.<tag>-pytest-<version>.pyc, checked by the source's
hash, its code pointed at the source wherever it now is). A suite unit starts from a fresh copy of the project and
cannot write to its environment, so each unit rewrote every module again: 4.5 of arrow's 11 CPU seconds for a whole
run, 1.2 s of every unit's start in an environment with hypothesis. Rewriting only parses and compiles (nothing of the
project runs), so the host makes these files with the sandbox's own pytest, whose version every environment pins:
once per library (added to the archive its units unpack) and once per environment (its plugins' modules). A unit's
pytest reads them as its own cache and rewrites whatever they do not hold, so outcomes and messages are unchanged.
The library's own modules get the bytecode Python's import would cache (checked by the source's hash, as pytest's):
each unit compiled them again (arrow: 0.03 of a unit's 0.2 CPU s start); a module a candidate changes no longer
matches its hash and is compiled from the changed file, as without it.
"""
from __future__ import annotations

import ast
import gzip
import hashlib
import importlib.util
import inspect
import io
import marshal
import os
import sys

from flawforge.debugging.layout import ProjectLayout
from flawforge.debugging.syntax import compile_tree, parse
from flawforge.sandbox.runtime.archive import MAX_MEMBER_BYTES, MAX_MEMBERS, MAX_TOTAL_BYTES

# A module larger than this is left to the unit (the host parses nothing unbounded).
LARGEST_SOURCE = 4 << 20
# A pyc's flags (PEP 552): hash-based, the hash checked against the source whenever it is imported.
CHECKED_HASH = (0b11).to_bytes(4, "little")
MARKER = "flawforge-rewritten"  # in an environment's folder: the pytest tag its plugins' modules were rewritten for


def pytest_tag() -> str:
    """The tail of the names pytest gives its rewritten modules (`.cpython-311-pytest-9.2.0.pyc`)."""
    from _pytest.assertion.rewrite import PYC_TAIL

    return PYC_TAIL


def cached_name(path: str) -> str:
    """Where pytest looks for the rewritten `path` ('tests/test_x.py' -> 'tests/__pycache__/test_x.<tag>')."""
    folder, _, name = path.rpartition("/")
    return f"{folder + '/' if folder else ''}__pycache__/{name[:-3]}{pytest_tag()}"


def bytecode_name(path: str) -> str:
    """Where Python's import looks for the bytecode of `path` ('pkg/mod.py' -> 'pkg/__pycache__/mod.cpython-311.pyc';
    cache_from_source would follow this process's PYTHONPYCACHEPREFIX, which a unit does not have)."""
    folder, _, name = path.rpartition("/")
    return f"{folder + '/' if folder else ''}__pycache__/{name[:-3]}.{sys.implementation.cache_tag}.pyc"


def rewritten(source: bytes, path: str) -> bytes | None:
    """The file pytest would cache for the module `source`, or None where the unit had better rewrite it itself:
    pytest would warn while rewriting it (an assert of a tuple: with warnings as errors that fails collection),
    or it does not parse or compile here."""
    from _pytest.assertion.rewrite import _write_pyc_fp, rewrite_asserts

    if len(source) > LARGEST_SOURCE:
        return None
    try:
        tree = parse(source, filename=path)
        if any(isinstance(node, ast.Assert) and isinstance(node.test, ast.Tuple) and node.test.elts
               for node in ast.walk(tree)):
            return None
        rewrite_asserts(tree, source, path, None)
        code = compile_tree(tree, path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    out = io.BytesIO()
    _write_pyc_fp(out, importlib.util.source_hash(source), code)
    return out.getvalue()


def compiled(source: bytes, path: str) -> bytes | None:
    """The file Python's import would cache for the module `source` (as importlib compiles it, in a pyc checked
    by the source's hash: a fresh copy of the project with new mtimes takes it, a changed source does not), or None
    where it does not compile here."""
    if len(source) > LARGEST_SOURCE:
        return None
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return importlib.util.MAGIC_NUMBER + CHECKED_HASH + importlib.util.source_hash(source) + marshal.dumps(code)


def rewrites_pytest_may_take(layout: ProjectLayout, files: dict[str, bytes]) -> list[str]:
    """The project's files pytest may rewrite: every module under its test paths, and every conftest.py."""
    tests = tuple(path.rstrip("/") + "/" for path in layout.test_paths)
    return sorted(path for path in files if path.endswith(".py") and (
        path in layout.test_paths or path.startswith(tests) or path.rsplit("/", 1)[-1] == "conftest.py"))


def with_rewritten_tests(archive: bytes, files: dict[str, bytes], layout: ProjectLayout) -> bytes:
    """The project's archive with pytest's rewritten test modules and the library modules' bytecode added; the
    archive itself when they would not fit the bounds a unit unpacks (or there are none)."""
    from flawforge.debugging.conversation import deterministic_tar

    added = {}
    tests = rewrites_pytest_may_take(layout, files)
    for path in tests:
        made = rewritten(files[path], path)
        if made is not None and len(made) <= MAX_MEMBER_BYTES:
            added[cached_name(path)] = made
    for path in sorted(set(layout.modules) - set(tests)):
        made = compiled(files[path], path)
        if made is not None and len(made) <= MAX_MEMBER_BYTES:
            added[bytecode_name(path)] = made
    folders = {name.rpartition("/")[0] for name in added}
    if not added or (len(files) + len(added) + len(folders) + len({f.rpartition("/")[0] for f in files}) > MAX_MEMBERS
                     or sum(map(len, files.values())) + sum(map(len, added.values())) > MAX_TOTAL_BYTES):
        return archive
    return gzip.compress(deterministic_tar({f"project/{path}": data for path, data in {**files, **added}.items()}),
                         compresslevel=1, mtime=0)


def prepared_archive(archive: bytes, files: dict[str, bytes], layout: ProjectLayout, cache: str | None) -> bytes:
    """with_rewritten_tests, kept in the folder `cache` (prepared/<key>.tar.gz) by what makes it: the archive, the
    layout's tests and modules, pytest's tag, Python's bytecode magic and the code that writes it; a later run of the
    same library reads it back (arrow's test files alone take 3.6 CPU s to rewrite). No cache: made each time."""
    if cache is None:
        return with_rewritten_tests(archive, files, layout)
    from flawforge.debugging.conversation import deterministic_tar

    maker = "\0".join([inspect.getsource(sys.modules[__name__]), inspect.getsource(deterministic_tar),
                        repr((MAX_MEMBER_BYTES, MAX_MEMBERS, MAX_TOTAL_BYTES)), pytest_tag(),
                        repr((layout.test_paths, sorted(layout.modules)))])
    key = hashlib.sha256(archive + importlib.util.MAGIC_NUMBER + maker.encode()).hexdigest()[:32]
    path = os.path.join(cache, "prepared", f"{key}.tar.gz")
    try:
        with open(path, "rb") as kept:
            return kept.read()
    except OSError:
        pass
    made = with_rewritten_tests(archive, files, layout)
    try:
        _write_atomically(path, made)
    except OSError:  # a read-only cache (a stack's mounted volume) serves what it holds
        pass
    return made


def rewrite_plugins(folder: str) -> None:
    """Writes pytest's rewritten modules of the environment in `folder`'s plugins (what pytest marks for
    rewriting: every module of a distribution with a pytest11 entry point), each beside its source, once."""
    import importlib.metadata

    from _pytest.config import _iter_rewritable_modules

    if plugins_rewritten(folder):
        return
    for distribution in importlib.metadata.distributions(path=[folder]):
        if not any(entry.group == "pytest11" for entry in distribution.entry_points):
            continue
        listed = [str(file) for file in distribution.files or []]
        names = set(_iter_rewritable_modules(listed))
        for path in listed:
            top = path.split("/", 1)[0].removesuffix(".py")
            if path.endswith(".py") and top in names:
                _write_beside(os.path.join(folder, path), path)
    marker = os.path.join(folder, MARKER)
    with open(marker, "w", encoding="utf-8") as done:
        done.write(pytest_tag())
    os.chmod(marker, 0o644)


def plugins_rewritten(folder: str) -> bool:
    """The environment in `folder` holds its plugins' rewritten modules for this pytest."""
    try:
        with open(os.path.join(folder, MARKER), encoding="utf-8") as done:
            return done.read() == pytest_tag()
    except OSError:
        return False


def _write_beside(source_path: str, path: str) -> None:
    try:
        with open(source_path, "rb") as source:
            made = rewritten(source.read(), path)
    except OSError:
        return
    if made is None:
        return
    target = os.path.join(os.path.dirname(source_path), cached_name(os.path.basename(source_path)))
    _write_atomically(target, made)


def _write_atomically(target: str, data: bytes) -> None:
    """`data` at `target`, whole or not at all, readable by all (units run as other users)."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    os.chmod(os.path.dirname(target), 0o755)
    scratch = f"{target}.{os.getpid()}.tmp"
    with open(scratch, "wb") as out:
        out.write(data)
    os.chmod(scratch, 0o644)
    os.replace(scratch, target)
