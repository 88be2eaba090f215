"""The math-errors job on the whole shared template corpus: embedded twice, and on RabbitMQ with the services' workers."""
from __future__ import annotations

import json
import os
import re
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest

from stack_support import job_through_the_services

from flawforge.math.gsm8k import index_range, numbered_lines
from flawforge.proto.math import COMPUTATIONAL_TYPES, CONCEPTUAL_TYPES, Candidate, Reject, TemplateValidation

IDENTICAL = ("candidates.jsonl", "rejects.jsonl", "validation.jsonl")
# A whole-corpus run takes minutes; the identity checks rerun this sample (all tiers, a model fallback,
# missing templates) and compare it with the whole-corpus run. Set it to 0-2499 to rerun everything.
IDENTITY_SAMPLE = os.environ.get("FLAWFORGE_MATH_IDENTITY_INDICES", "100-199")


def corpus_params(shared_data: Path, **extra) -> dict:
    return {"gsm8k": str(shared_data / "gsm8k" / "train.jsonl"),
            "templates": str(shared_data / "formalization-templates"), **extra}


def run_embedded(params: dict, root: Path) -> Path:
    from flawforge.cli.jobs_client import run_embedded as run
    from flawforge.settings import Settings

    out = root / "out"
    run("math-errors", params, out, Settings(bus="memory", blob_backend="local", blob_dir=str(root / "blobs")))
    return out


def summary_without_time(out: Path) -> dict:
    summary = json.loads((out / "summary.json").read_text())
    assert summary.pop("elapsed_seconds") >= 0
    return summary


@pytest.fixture(scope="module")
def corpus_run(shared_data, tmp_path_factory) -> Path:
    return run_embedded(corpus_params(shared_data), tmp_path_factory.mktemp("corpus-a"))


def read_jsonl(path: Path, model):
    return [model.model_validate_json(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_whole_corpus_no_crash_every_error_type(corpus_run):
    summary = summary_without_time(corpus_run)
    candidates = read_jsonl(corpus_run / "candidates.jsonl", Candidate)
    rejects = read_jsonl(corpus_run / "rejects.jsonl", Reject)
    assert summary["problems"] == 2500
    assert summary["candidates"] == len(candidates) and summary["rejects"] == len(rejects)
    # every requested problem is accounted for: it produced candidates or a recorded reason
    with_candidates = {c.problem_index for c in candidates}
    assert with_candidates | {r.problem_index for r in rejects} == set(range(2500))
    assert summary["rejects_by_reason"]["missing_template"] == 70  # the symbolic tier has no templates
    for error_type in COMPUTATIONAL_TYPES + CONCEPTUAL_TYPES:  # fraction_reciprocal: see test_mutations
        assert summary["candidates_by_error_type"].get(error_type, 0) > 0 or error_type == "fraction_reciprocal", \
            error_type
    assert Counter(c.error_type for c in candidates) == {k: v for k, v in
                                                         summary["candidates_by_error_type"].items() if v}


@pytest.mark.slow
def test_every_candidate_is_annotated_consistently(corpus_run):
    candidates = read_jsonl(corpus_run / "candidates.jsonl", Candidate)
    validations = {(v.problem_index, v.template_model): v
                   for v in read_jsonl(corpus_run / "validation.jsonl", TemplateValidation)}
    assert len({c.id for c in candidates}) == len(candidates)
    failed: dict[str, list[str]] = {}
    for c in candidates:
        flawed_lines = numbered_lines(c.flawed_solution)
        checks = {
            "template validated": validations[(c.problem_index, c.template_model)].valid,
            "error type of its family": c.error_type in (COMPUTATIONAL_TYPES if c.family == "computational"
                                                         else CONCEPTUAL_TYPES),
            "erroneous line is L<k> or FA": bool(re.fullmatch(r"L[1-9]\d*|FA", c.erroneous_line_number)),
            "erroneous line is in the flawed solution": c.erroneous_line_number in flawed_lines,
            "final answers differ": c.flawed_final_answer != c.correct_final_answer,
            "flawed final answer is the solution's": _same_number(flawed_lines.get("FA"),
                                                                  c.flawed_final_answer.to_python()),
            "solutions differ": c.flawed_solution != c.original_solution,
            # traces only when asked for (test_cli_run_records_fallbacks_and_missing_templates_then_exports)
            "no traces, an explanation": c.correct_trace is None and c.flawed_trace is None and bool(c.explanation),
        }
        for check, held in checks.items():
            if not held:
                failed.setdefault(check, []).append(f"{c.id} (problem {c.problem_index}, {c.error_type}, "
                                                    f"{c.erroneous_line_number})")
    assert not failed, {check: (len(ids), ids[:3]) for check, ids in failed.items()}


def _same_number(text: str | None, value) -> bool:
    """Whether the solution's final answer text shows `value`, rounded to the decimals it shows."""
    try:
        shown = text.replace(",", "").replace("$", "")
        if "/" in shown:
            return Fraction(shown) == value
        decimals = len(shown.partition(".")[2])
        return abs(round(float(value), decimals) - float(shown)) < 1e-9
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):
        return False


def lines_of_sample(path: Path, sample: range) -> bytes:
    """The lines of a whole-corpus artifact that belong to the sample's problems, bytes unchanged."""
    return b"".join(line for line in path.read_bytes().splitlines(keepends=True)
                    if json.loads(line)["problem_index"] in sample)


@pytest.mark.slow
def test_a_second_run_gives_the_same_bytes(shared_data, corpus_run, tmp_path):
    """Another job, on a sample, gives byte for byte the corpus run's lines for those problems:
    output depends on nothing but the inputs (not on the run, nor on the other problems of the job)."""
    again = run_embedded(corpus_params(shared_data, indices=IDENTITY_SAMPLE), tmp_path)
    sample = index_range(IDENTITY_SAMPLE)
    for name in IDENTICAL:
        assert (again / name).read_bytes() == lines_of_sample(corpus_run / name, sample), name
    assert read_jsonl(again / "candidates.jsonl", Candidate)


@pytest.mark.slow
@pytest.mark.rabbitmq
def test_rabbitmq_run_through_the_services_is_identical(shared_data, corpus_run, amqp_url, tmp_path):
    from flawforge.proto.jobs import JobState

    params = corpus_params(shared_data, indices=IDENTITY_SAMPLE)
    with job_through_the_services(amqp_url, tmp_path / "blobs", "math-errors", params, 600) as (jobs, status):
        assert status.state == JobState.succeeded, status.error
        for name in IDENTICAL:
            assert jobs.artifact(status.job_id, name) == lines_of_sample(corpus_run / name,
                                                                         index_range(IDENTITY_SAMPLE)), name


def test_an_embedded_run_of_math_errors_loads_only_what_it_runs():
    """Start-up is part of what a user waits for: the command's embedded stack for math-errors imports neither the
    other pipelines (the model gateway's, the pressure study's) nor an HTTP client."""
    import subprocess
    import sys

    probe = ("import sys\n"
             "from flawforge.assembly import embedded_stack\n"
             "from flawforge.cli.jobs_client import run_embedded\n"
             "from flawforge.jobs.pipeline import pipeline_named\n"
             "from flawforge.services import consumers_of, load_service\n"
             "pipeline = pipeline_named('math-errors')\n"
             "queues = [c.queue for name in (pipeline.owner, *pipeline.services)\n"
             "          for c in consumers_of(load_service(name), ['math-errors'])]\n"
             "assert pipeline.queue in queues and 'math.problems' in queues, queues\n"
             "print(sorted(m for m in sys.modules if m.startswith(('flawforge.llm', 'flawforge.pressure', 'httpx',\n"
             "    'flawforge.pipelines.templates', 'flawforge.pipelines.pressure', 'flawforge.services.llm'))))\n")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", loaded


def test_bad_parameters_fail_the_job_with_a_clear_error(shared_data, tmp_path):
    from flawforge.errors import FlawforgeError

    with pytest.raises(FlawforgeError, match="beyond the 7473 problems"):
        run_embedded(corpus_params(shared_data, indices="7470-7480"), tmp_path / "a")
    with pytest.raises(FlawforgeError, match="invalid templates: Value error, .*/none does not exist"):
        run_embedded({**corpus_params(shared_data), "templates": str(tmp_path / "none")}, tmp_path / "b")


def test_cli_run_records_fallbacks_and_missing_templates_then_exports(shared_data, tmp_path):
    from typer.testing import CliRunner

    from flawforge.cli.main import app

    gsm8k = str(shared_data / "gsm8k" / "train.jsonl")
    templates = str(shared_data / "formalization-templates")
    runner = CliRunner()
    # 116: the preferred model's template raises, the fallback's works; 150 has no template at all, so its run
    # produced nothing: a non-zero exit that says so, its rejects kept
    for indices, exit_code in (("116-116", 0), ("150", 1)):
        result = runner.invoke(app, ["run", "math-errors", "--gsm8k", gsm8k, "--templates", templates,
                                     "--indices", indices, "--families", "conceptual", "--with-traces", "--out",
                                     str(tmp_path / indices)])
        assert result.exit_code == exit_code, result.output
    assert "produced nothing: no problem of 150 has a template" in str(result.exception)
    fallback = tmp_path / "116-116"
    candidates = read_jsonl(fallback / "candidates.jsonl", Candidate)
    assert candidates and {(c.problem_index, c.template_model, c.family) for c in candidates} == \
           {(116, "openai_gpt-4.1", "conceptual")}
    for c in candidates:  # --with-traces: each candidate's traces, the flawed one ending in its answer
        assert c.correct_trace and {s.name: s.value for s in c.flawed_trace}["answer"] == c.flawed_final_answer
    rejects = read_jsonl(fallback / "rejects.jsonl", Reject)
    assert [(r.template_model, r.reason) for r in rejects if r.reason == "not_executable"] == \
           [("google_gemini-2.5-flash", "not_executable")]
    summary = summary_without_time(fallback)
    assert summary["templates_by_model"] == {"openai_gpt-4.1": 1}
    assert set(summary["candidates_by_error_type"]) == set(CONCEPTUAL_TYPES)
    assert [r.reason for r in read_jsonl(tmp_path / "150" / "rejects.jsonl", Reject)] == ["missing_template"]
    assert (tmp_path / "150" / "candidates.jsonl").read_text() == ""

    result = runner.invoke(app, ["export", "math", "--candidates", str(fallback / "candidates.jsonl"), "--gsm8k", gsm8k,
                                 "--out", str(tmp_path / "dataset"), "--test-fraction", "1"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "dataset" / "test.jsonl").read_text().splitlines()]
    assert len(rows) == len(candidates) and (tmp_path / "dataset" / "train.jsonl").read_text() == ""
    assert all(row["erroneous_line"] for row in rows)


def test_cli_rejects_bad_options_in_one_line(shared_data, tmp_path):
    from typer.testing import CliRunner

    from flawforge.cli.main import app

    result = CliRunner().invoke(app, ["run", "math-errors", "--gsm8k", str(shared_data / "gsm8k" / "train.jsonl"),
                                      "--templates", str(shared_data / "formalization-templates"),
                                      "--indices", "9-3", "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "invalid indices: Value error, '9-3': the first index is above the last" in str(result.exception)
