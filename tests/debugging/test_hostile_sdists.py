"""A libraries folder of one good small library and every hostile sdist of the attack corpus: each hostile one is
that library's reject with its reason, the good one keeps its instances, the job's outputs are its own, and reading
the sparse sdist leaves the mutator's memory where it was."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from flawforge.proto.debugging import BugReject, Instance
from tests.sandbox.sdists import TOP, corpus, member, tar_gz

CORPUS = corpus()
MEMORY_BOUND_KIB = 64 << 10
# The good library: small, with functions its tests check closely enough for a changed one to fail them.
CALC = """def clamp(x, low, high):
    if x < low:
        return low
    if x > high:
        return high
    return x


def total(values):
    result = 0
    for value in values:
        result += value
    return result
"""
TESTS = """from pkg.calc import clamp, total


def test_clamp():
    assert [clamp(x, 0, 10) for x in (-5, 0, 5, 10, 15)] == [0, 0, 5, 10, 10]


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_total():
    assert total([1, 2, 3]) == 6 and total([]) == 0


def test_total_of_one():
    assert total([0]) == 0
"""


def demo_archive() -> bytes:
    return tar_gz([member(f"{TOP}/pkg/calc.py", CALC.encode()), member(f"{TOP}/tests/test_calc.py", TESTS.encode())])


def test_hostile_sdists_are_rejects_and_the_good_library_keeps_its_instances(tmp_path):
    from flawforge.cli.jobs_client import run_embedded
    from flawforge.settings import Settings

    libraries = tmp_path / "libraries"
    libraries.mkdir()
    (libraries / "demo-1.0.tar.gz").write_bytes(demo_archive())
    for attack in CORPUS:
        (libraries / attack.archive_name).write_bytes(attack.data)
    out = tmp_path / "out"
    run_embedded("debug-conversations", {"libraries": str(libraries), "per_library": 2, "seed": 0}, out,
                 Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path / "blobs")))

    instances = [Instance.model_validate_json(line) for line in (out / "instances.jsonl").read_text().splitlines()]
    assert instances and {i.source for i in instances} == {"demo"}
    rejects = {r.source: r for r in map(BugReject.model_validate_json, (out / "rejects.jsonl").read_text().splitlines())
               if r.reason == "unusable_library"}
    for attack in CORPUS:
        reject = rejects[attack.archive_name.removesuffix("-1.0.tar.gz")]
        assert attack.refused in reject.detail, (attack.name, reject.detail)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["libraries"] == len(CORPUS) + 1 and summary["valid"] == len(instances)
    # Nothing of a hostile member reached the outputs (the traversal one carried a forged instances.jsonl).
    assert not any(b"forged" in path.read_bytes() for path in out.rglob("*") if path.is_file())
    assert not (tmp_path / "instances.jsonl").exists()


MEASURE = textwrap.dedent('''
    import resource, sys
    from flawforge.debugging.layout import read_archive
    from flawforge.errors import FlawforgeError

    data = open(sys.argv[1], "rb").read()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        read_archive(data)  # what the mutator does first with a library
    except FlawforgeError as exc:
        print(exc)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
''')


def test_reading_the_sparse_sdist_keeps_the_mutators_memory_bounded(tmp_path):
    """Its member declares 1 GiB: read whole, as tarfile reads sparse members, it took that much."""
    sparse = next(a for a in CORPUS if a.name == "sparse_member")
    path = tmp_path / sparse.archive_name
    path.write_bytes(sparse.data)
    done = subprocess.run([sys.executable, "-c", MEASURE, str(path)], capture_output=True, text=True, timeout=120,
                          check=True)
    refusal, growth_kib = done.stdout.splitlines()
    assert sparse.refused in refusal
    assert int(growth_kib) < MEMORY_BOUND_KIB, f"peak RSS grew {int(growth_kib) >> 10} MiB"
