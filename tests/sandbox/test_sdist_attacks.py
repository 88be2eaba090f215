"""Every hostile sdist of attacks/sdists/ is refused, with its rule named, by the reader the host and the sandbox
share: on the host before any content is read (fast, whatever it declares), and by the suite unit of a sandbox sent
it directly, which runs nothing of it and writes nothing outside its work dir."""
from __future__ import annotations

import gzip
import time
from pathlib import Path

import pytest

from flawforge.debugging.layout import UnusableArchive, layout_of, read_archive
from flawforge.proto.sandbox import SandboxLimits
from tests.sandbox.sdists import TOP, corpus, gzipped, member, tar_gz

CORPUS = corpus()
LIMITS = SandboxLimits(timeout_s=30, memory_mb=512, workdir_mb=16, open_files=256)


def test_the_corpus_holds_every_kind():
    assert {a.name for a in CORPUS} >= {"sparse_member", "huge_member", "many_files", "traversal", "absolute_name",
                                        "symlink", "hard_link"}


@pytest.mark.parametrize("attack", CORPUS, ids=[a.name for a in CORPUS])
def test_the_host_refuses_the_sdist_naming_the_member_and_the_rule(attack):
    started = time.process_time()
    with pytest.raises(UnusableArchive) as refused:
        read_archive(attack.data)
    assert attack.refused in str(refused.value) and "member '" in str(refused.value)
    assert time.process_time() - started < 5


def test_the_suite_unit_refuses_them_too(tmp_path):
    from flawforge.sandbox.suites import suite_sandbox

    sandbox = suite_sandbox()
    assert sandbox.run_suite(tar_gz([]), args=["tests"], limits=LIMITS).outcome == "ok"  # the same sdist, unharmed
    for attack in CORPUS:
        run = sandbox.run_suite(attack.data, args=["tests"], limits=LIMITS)
        assert run.outcome == "crashed" and not run.tests, (attack.name, run.outcome, run.detail)
    assert not Path("/tmp/flawforge-absolute-member.py").exists()


def test_layout_detection_is_linear_in_the_files():
    """12,000 top-level test files took 27.8 s of CPU when every test path was compared with every other."""
    files = [f"test_{number}.py" for number in range(12000)] + [f"pkg/m{number}.py" for number in range(12000)]
    started = time.process_time()
    layout = layout_of("many", "1.0", files)
    assert time.process_time() - started < 1
    assert len(layout.test_paths) == 12000 and len(layout.modules) == 12000


def test_the_gzip_stream_is_read_once_within_its_bound_and_whole():
    """A gzip stream is decompressed in memory once, bounded: one that unpacks past the bound is refused before it
    is all inflated, one cut short is no archive, and one of several members (with gzip's zero padding after them)
    reads as the tar they hold together."""
    from flawforge.sandbox.runtime.archive import ArchiveRefused, project_members

    plain = gzip.decompress(tar_gz([member(f"{TOP}/pkg/data.txt", b"x" * 1000)]))
    whole = dict(project_members(gzipped(plain)))
    assert whole["pkg/data.txt"] == b"x" * 1000 and "tests/test_pkg.py" in whole
    half = len(plain) // 2
    assert dict(project_members(gzipped(plain[:half]) + b"\0" * 8 + gzipped(plain[half:]))) == whole
    with pytest.raises(ArchiveRefused, match="not a readable tar archive"):
        list(project_members(gzipped(plain)[:-12]))
    bomb = gzipped(bytes(64 << 20))  # 64 MiB of zeros in 64 KiB
    started = time.process_time()
    with pytest.raises(ArchiveRefused, match="unpacks to more than"):
        list(project_members(bomb, max_total_bytes=1 << 20, max_members=16))
    assert time.process_time() - started < 0.5
    many = gzipped(plain) + gzipped(b"") * 100_000  # a member's rest of the stream is copied: bounded, not quadratic
    started = time.process_time()
    with pytest.raises(ArchiveRefused, match="more than 64 gzip members"):
        list(project_members(many))
    assert time.process_time() - started < 0.5
