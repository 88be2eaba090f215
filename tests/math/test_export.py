"""The error-detection dataset export: rows, the split by problem, bad input."""
from __future__ import annotations

import json

import pytest

from flawforge.math.export import ExportError, build_dataset, held_out_problems, parse_candidates
from flawforge.math.gsm8k import numbered_lines
from flawforge.proto.math import Candidate
from flawforge.proto.values import TypedValue


def candidate(problems, index: int, error_type: str = "off_by_n", line: str = "L1") -> Candidate:
    """A candidate on GSM8K problem `index` whose flawed solution changes its first line's result."""
    original = problems[index].answer
    first = original.splitlines()[0]
    flawed = original.replace(first, first + " (+1)", 1)
    return Candidate(id=f"{index}-{error_type}-{line}", problem_index=index, tier="tier1",
                     template_model="google_gemini-2.5-flash", family="computational", error_type=error_type,
                     target_variable="x", erroneous_line_number=line, correct_value=TypedValue.of(1),
                     flawed_value=TypedValue.of(2),
                     correct_final_answer=TypedValue.of(int(problems[index].final_answer.replace(",", ""))),
                     flawed_final_answer=TypedValue.of(2), mutated_code="def solve():\n    return 2\n",
                     correct_trace=[], flawed_trace=[], original_solution=original, flawed_solution=flawed,
                     explanation="The first line is off by one.", seed=7)


def test_rows_carry_the_problem_the_error_and_its_line(problems):
    splits = build_dataset([candidate(problems, 1), candidate(problems, 1, "decimal_shift", "FA")], problems, 0.0, 0)
    assert splits["test"] == []
    final, first = splits["train"]  # sorted by problem, then candidate id
    assert first["question"] == problems[1].question and first["correct_solution"] == problems[1].answer
    assert first["erroneous_line"] == problems[1].answer.splitlines()[0] + " (+1)"
    assert (first["error_type"], first["erroneous_line_number"], first["source"]) == ("off_by_n", "L1", "programmatic")
    assert final["erroneous_line"] == "10"  # the flawed solution's final answer
    assert set(first) >= {"question", "correct_solution", "flawed_solution", "error_type", "erroneous_line",
                          "explanation", "source"}


def test_split_never_puts_a_problem_on_both_sides(problems):
    candidates = [candidate(problems, i, t) for i in range(40) for t in ("off_by_n", "decimal_shift")]
    splits = build_dataset(candidates, problems, 0.25, seed=3)
    train = {r["problem_index"] for r in splits["train"]}
    test = {r["problem_index"] for r in splits["test"]}
    assert not train & test and len(test) == 10 and len(train) == 30
    assert build_dataset(candidates, problems, 0.25, seed=3) == splits  # reproducible
    assert {r["problem_index"] for r in build_dataset(candidates, problems, 0.25, seed=4)["test"]} != test


def test_split_is_stable_when_problems_are_added():
    before = held_out_problems(range(100), 0.5, seed=1)
    after = held_out_problems(range(101), 0.5, seed=1)
    assert len(before ^ after) <= 2


def test_numbered_lines_label_the_final_answer():
    assert numbered_lines("a\n\nb\n#### 3") == {"L1": "a", "L2": "b", "FA": "3"}


def test_bad_input_is_named(problems):
    with pytest.raises(ExportError, match="line 2 is not a candidate"):
        parse_candidates(candidate(problems, 1).model_dump_json() + "\n{\"id\": 1}\n", "c.jsonl")
    with pytest.raises(ExportError, match="test fraction must be between 0 and 1"):
        build_dataset([candidate(problems, 1)], problems, 1.5, 0)
    far = candidate(problems, 1).model_copy(update={"problem_index": 10**6})
    with pytest.raises(ExportError, match="does not have"):
        build_dataset([far], problems, 0.2, 0)


def test_a_gsm8k_file_of_other_problems_is_refused(problems, shared_data):
    from flawforge.math.gsm8k import read_gsm8k

    train_candidates = [candidate(problems, i) for i in range(20)]
    with pytest.raises(ExportError, match="does not hold the candidates' problems: 20 of 20"):
        build_dataset(train_candidates, read_gsm8k(shared_data / "gsm8k" / "test.jsonl"), 0.2, 0)


def test_export_command(tmp_path, problems, shared_data):
    from typer.testing import CliRunner

    from flawforge.cli.main import app

    path = tmp_path / "candidates.jsonl"
    path.write_text("".join(candidate(problems, i).model_dump_json() + "\n" for i in range(10)))
    result = CliRunner().invoke(app, ["export", "math", "--candidates", str(path), "--gsm8k",
                                      str(shared_data / "gsm8k" / "train.jsonl"), "--out", str(tmp_path / "ds"),
                                      "--test-fraction", "0.3"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"train": {"rows": 7, "problems": 7}, "test": {"rows": 3, "problems": 3}}
    rows = [json.loads(line) for line in (tmp_path / "ds" / "test.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(r["split"] == "test" for r in rows)
