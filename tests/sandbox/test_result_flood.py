"""A program, or a library's test in a suite unit, that floods its result pipe costs the service and the zygote
about its unit's result_bytes, once: the report is capped per unit (not per program), passed on in chunks to a
spool file, and not parsed once it overflowed. Memory is the resident size, read from /proc, of this
process (the service's side) and the zygote's processes (not the unit's own), sampled while the unit runs."""
from __future__ import annotations

import os
import threading
import time

from flawforge.proto.sandbox import SandboxLimits
from flawforge.sandbox import Sandbox
from tests.debugging.test_suite_unit import archive

FLOOD_MIB = 200
# What the pipeline may grow by: the report read back once, and room for the allocator's slack.
SLACK_MIB = 24
# Valid trace lines, the costliest to parse (a trace step each), written past the pipe's reader.
FLOOD = '''import os


def flood():
    line = b'["s",1,"x",["int",1]]\\n' * 4096
    for _ in range({mib} * 1024 * 1024 // len(line)):
        os.write(3, line)
'''


def resident_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            return next((int(line.split()[1]) for line in status if line.startswith("VmRSS:")), 0)
    except OSError:
        return 0


def pipeline_pids(sandbox) -> list[int]:
    """The zygote's processes while it runs no unit: it and its descendants (a namespace's init, the fork server)."""
    pids = [sandbox.zygote_pid()]
    for pid in pids:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as children:
                pids += [int(child) for child in children.read().split()]
    return pids


def pipeline_kib(pids: list[int]) -> int:
    """This process (the service's side) and the zygote's processes: not the units, whose memory has its limit."""
    return resident_kib(os.getpid()) + sum(resident_kib(pid) for pid in pids)


def growth_mib(sandbox, run):
    """run()'s result and how far the pipeline's resident memory rose above where it was, at its peak."""
    pids = pipeline_pids(sandbox)
    base = peak = pipeline_kib(pids)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, pipeline_kib(pids))
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result = run()
    finally:
        done.set()
        sampler.join()
    return result, (peak - base) / 1024


def test_a_program_flooding_its_result_pipe_costs_the_pipeline_one_cap():
    limits = SandboxLimits(timeout_s=30, memory_mb=256, result_bytes=8 << 20)
    with Sandbox.from_settings(limits=limits, workers=1) as sandbox:
        sandbox.execute("warm = True\n")
        result, grown = growth_mib(sandbox, lambda: sandbox.trace_call(FLOOD.format(mib=FLOOD_MIB) + "\n\ndef solve():\n"
                                                                        "    flood()\n", limits=limits))
    assert result.outcome == "output_limit" and "exceeded 8388608 bytes" in result.detail
    assert grown < 8 + SLACK_MIB, f"the pipeline grew {grown:.0f} MiB for an 8 MiB cap"


def test_a_library_test_flooding_in_a_suite_unit_costs_the_pipeline_one_cap():
    """The test floods only with the change (double(2) == 5): the clean run passes, the changed one is an
    output_limit, and the pipeline grows by about the unit's cap, not by what the test wrote."""
    from flawforge.sandbox.suites import suite_sandbox

    core = "def double(x):\n    return 2 * x\n"
    project = archive({"lib-1.0/lib/__init__.py": "", "lib-1.0/lib/core.py": core,
                       "lib-1.0/tests/test_core.py": FLOOD.format(mib=FLOOD_MIB) + (
                           "\n\nfrom lib.core import double\n\n\ndef test_double():\n    if double(2) == 5:\n"
                           "        flood()\n    assert double(2) in (4, 5)\n")})
    limits = SandboxLimits(timeout_s=30, memory_mb=512, open_files=256, result_bytes=4 << 20)
    with suite_sandbox.__wrapped__() as sandbox:  # its own zygote, closed after: the shared one stays open
        clean = sandbox.run_suite(project, args=["tests"], limits=limits)
        changed, grown = growth_mib(sandbox, lambda: sandbox.run_suite(
            project, {"lib/core.py": core.replace("2 * x", "x + 3")}, args=["tests"], limits=limits))
    assert [t.outcome for t in clean.tests] == ["passed"]
    assert changed.outcome == "output_limit" and "exceeded 4194304 bytes" in changed.detail
    assert grown < 4 + SLACK_MIB, f"the pipeline grew {grown:.0f} MiB for a 4 MiB cap"
