"""The mutator's worker: problems generated in its pool of processes, with or without the template's run from
validation, yield exactly what in-process generation does."""
from __future__ import annotations

import re

import pytest

from flawforge.errors import FlawforgeError
from flawforge.jobs.context import JobContext
from flawforge.math.generate import catalog_order, generate_for_problem
from flawforge.math.gsm8k import read_gsm8k
from flawforge.math.program import BoundProgram, Program
from flawforge.math.templates import TemplateFolder, problem_template
from flawforge.proto.base import jsonl
from flawforge.proto.math import BatchProblem, ProblemBatch, ProblemBatchResult, ProblemTemplate, ValidatedTemplate
from flawforge.assembly import platform_for
from flawforge.sandbox import Sandbox
from flawforge.services.mutator.worker import make_problem_handler, sandbox_ready
from flawforge.settings import Settings

FAMILIES = ["computational", "conceptual"]


def first_template(folder: TemplateFolder, problems: list, index: int) -> ProblemTemplate:
    """The problem's template in its first tier by the alphabetically first model."""
    tier = folder.tiers_of(index)[0]
    model = sorted(folder.models(tier, index))[0]
    return problem_template(problems[index], tier, model, *folder.files(tier, index, model).read())


def test_pool_generation_is_stored_byte_for_byte_as_in_process(shared_data, tmp_path):
    platform = platform_for(Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path)))
    folder = TemplateFolder(shared_data / "formalization-templates")
    problems = read_gsm8k(shared_data / "gsm8k" / "train.jsonl")
    sandbox_ready(platform)
    handle = make_problem_handler(platform)
    with Sandbox.from_settings(platform.settings) as sandbox:
        # problem 177's template is not straight-line code: its mutants run in the process's own sandbox
        batch, lines, expected = [], [], []
        for index, seed, with_run in ((0, 11, True), (3, 12, False), (7, 13, True), (177, 14, True)):
            template = first_template(folder, problems, index)
            run = sandbox.trace_call(template.code) if with_run else None
            lines.append(ValidatedTemplate(template=template, run=run).model_dump_json().encode() + b"\n")
            batch.append(BatchProblem(problem_index=index, tier=template.tier, template_model=template.template_model,
                                      seed=seed))
            expected.append(generate_for_problem(template, sandbox, FAMILIES, seed))
            assert expected[-1].candidates
            assert predictable(template, sandbox) == (index != 177)
        ref = platform.store.put_content("math/templates", b"".join(lines), ".jsonl")
        handle(ProblemBatch(job_id="job1", item="problems-0-177", problems=batch, templates=ref, families=FAMILIES))

        stored = ProblemBatchResult.model_validate_json(platform.store.get(JobContext(platform, "job1").item_key(
            "problems-0-177"))).problems
        assert [result.problem_index for result in stored] == [0, 3, 7, 177]
        for result, output in zip(stored, expected):
            # byte for byte as the catalog writes them
            assert jsonl(result.candidates) == jsonl(sorted(output.candidates, key=catalog_order))
            assert result.rejects == output.rejects
    platform.close()


def test_a_work_item_whose_templates_do_not_match_its_problems_fails_and_stores_nothing(shared_data, tmp_path):
    from flawforge.services.mutator import worker

    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path))
    platform = platform_for(settings)
    folder = TemplateFolder(shared_data / "formalization-templates")
    template = first_template(folder, read_gsm8k(shared_data / "gsm8k" / "train.jsonl"), 0)
    ref = platform.store.put_content("math/templates", ValidatedTemplate(template=template).model_dump_json().encode()
                                     + b"\n", ".jsonl")
    for problems, error in (([1], "the template for problem 1 is problem 0's"),
                            ([0, 1], "names 2 problems but its templates blob holds 1")):
        message = ProblemBatch(job_id="job3", item="bad", templates=ref, families=FAMILIES, problems=[
            BatchProblem(problem_index=index, tier=template.tier, template_model=template.template_model, seed=0)
            for index in problems])
        with pytest.raises(FlawforgeError, match=re.escape(error)):
            worker.generate_batch(settings.model_dump_json(), message.model_dump_json())
    assert not platform.store.exists(JobContext(platform, "job3").item_key("bad.jsonl"))
    platform.close()


def test_a_template_that_breaks_generation_is_a_reject_of_its_problem_alone(shared_data, tmp_path, monkeypatch):
    """generate_batch in this process (its generation engine patched): the broken problem's result is a
    generation_failed reject, its batch neighbours keep their candidates; a platform failure fails the whole
    work item, which stores nothing (the bus retries it)."""
    import flawforge.math.generate
    from flawforge.services.mutator import worker

    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path))
    platform = platform_for(settings)
    folder = TemplateFolder(shared_data / "formalization-templates")
    problems = read_gsm8k(shared_data / "gsm8k" / "train.jsonl")
    lines, batch = [], []
    with Sandbox.from_settings(settings) as sandbox:
        for index in (0, 3, 7):
            template = first_template(folder, problems, index)
            lines.append(ValidatedTemplate(template=template, run=sandbox.trace_call(template.code))
                         .model_dump_json().encode() + b"\n")
            batch.append(BatchProblem(problem_index=index, tier=template.tier, template_model=template.template_model,
                                      seed=index))
    ref = platform.store.put_content("math/templates", b"".join(lines), ".jsonl")
    real = flawforge.math.generate.generate_for_problem

    def breaks_on(index, error):
        def generate(template, *args, **options):
            if template.problem_index == index:
                raise error
            return real(template, *args, **options)
        return generate

    ctx = JobContext(platform, "job4")
    message = ProblemBatch(job_id="job4", item="three", problems=batch, templates=ref, families=FAMILIES)
    monkeypatch.setattr(flawforge.math.generate, "generate_for_problem", breaks_on(3, ZeroDivisionError("boom")))
    worker.generate_batch(settings.model_dump_json(), message.model_dump_json())
    stored = ProblemBatchResult.model_validate_json(platform.store.get(ctx.item_key("three"))).problems
    assert [result.problem_index for result in stored] == [0, 3, 7]
    first, broken, last = stored
    assert first.candidates and last.candidates and broken.candidates == []
    assert [(r.reason, r.detail) for r in broken.rejects] == [("generation_failed", "ZeroDivisionError: boom")]

    message = message.model_copy(update={"item": "retried"})
    monkeypatch.setattr(flawforge.math.generate, "generate_for_problem",
                        breaks_on(7, FlawforgeError("sandbox unavailable")))
    with pytest.raises(FlawforgeError, match="sandbox unavailable"):
        worker.generate_batch(settings.model_dump_json(), message.model_dump_json())
    assert not platform.store.exists(ctx.item_key("retried"))
    platform.close()


def predictable(template, sandbox) -> bool:
    run = sandbox.trace_call(template.code)
    program = Program.parse(template.code, template.logical_steps)
    return BoundProgram.bind(program, run.trace, run.return_value.to_python()).predictable


def test_a_process_starts_a_sandbox_only_for_a_template_whose_mutants_need_one(shared_data, tmp_path):
    """generate_batch as a generation process runs it: problem 0's mutants are executed by the arithmetic
    interpreter, problem 177's (its template is not straight-line code) in a sandbox started for them."""
    from flawforge.services.mutator import worker

    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path))
    platform = platform_for(settings)
    folder = TemplateFolder(shared_data / "formalization-templates")
    problems = read_gsm8k(shared_data / "gsm8k" / "train.jsonl")

    def stop_sandbox() -> None:
        if worker.sandbox.cache_info().currsize:
            worker.sandbox(settings.model_dump_json()).close()
        worker.sandbox.cache_clear()

    stop_sandbox()
    try:
        with Sandbox.from_settings(settings) as sandbox:
            for index, needs_sandbox in ((0, False), (177, True)):
                tier = folder.tiers_of(index)[0]
                model = folder.in_preference_order(tier, index, ["google_gemini-2.5-flash"])[0].model
                template = problem_template(problems[index], tier, model, *folder.files(tier, index, model).read())
                assert predictable(template, sandbox) != needs_sandbox
                ref = platform.store.put_content("math/templates", ValidatedTemplate(
                    template=template, run=sandbox.trace_call(template.code)).model_dump_json().encode() + b"\n",
                    ".jsonl")
                message = ProblemBatch(job_id="job2", item=f"item-{index}", templates=ref, families=FAMILIES,
                                       problems=[BatchProblem(problem_index=index, tier=tier, template_model=model,
                                                              seed=index)])
                worker.generate_batch(settings.model_dump_json(), message.model_dump_json())
                assert worker.sandbox.cache_info().currsize == int(needs_sandbox)

                [result] = ProblemBatchResult.model_validate_json(platform.store.get(
                    JobContext(platform, "job2").item_key(f"item-{index}"))).problems
                expected = sorted(generate_for_problem(template, sandbox, FAMILIES, index).candidates,
                                  key=catalog_order)
                assert expected and jsonl(result.candidates) == jsonl(expected)
    finally:
        stop_sandbox()
        platform.close()
