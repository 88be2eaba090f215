"""Every hostile sdist of attacks/sdists/ is refused, with its rule named, by the reader the host and the sandbox
share: on the host before any content is read (fast, whatever it declares), and by the suite unit of a sandbox sent
it directly, which runs nothing of it and writes nothing outside its work dir."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from flawforge.debugging.layout import UnusableArchive, layout_of, read_archive
from flawforge.proto.sandbox import SandboxLimits
from tests.sandbox.sdists import corpus, tar_gz

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
