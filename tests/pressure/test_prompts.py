import pytest
from pydantic import ValidationError

from flawforge.pressure.prompts import baseline_prompt, build_prompt, negative_prompt
from flawforge.proto.pressure import PromptRecord, p0_bin_of


def test_templates_are_whitespace_exact():
    assert baseline_prompt("What is the capital of France?") == (
        "Answer with exactly one English word.\nQuestion: What is the capital of France?\nAnswer:")
    assert negative_prompt("What is the capital of France?", "Paris") == (
        'Answer with exactly one English word.\nDo not use the word "Paris" anywhere in your answer.\n'
        "Question: What is the capital of France?\nAnswer:")
    assert build_prompt("negative", "q", "X") == negative_prompt("q", "X")
    with pytest.raises(ValueError, match="unknown condition"):
        build_prompt("positive", "q", "X")


def test_bins_and_record_checks():
    assert [p0_bin_of(p) for p in (0.0, 0.19999, 0.2, 0.6, 0.8, 1.0)] == [
        "0.0-0.2", "0.0-0.2", "0.2-0.4", "0.6-0.8", "0.8-1.0", "0.8-1.0"]
    fields = dict(prompt_id="facts-1", category="facts", question_text="Capital of France?", target_word="Paris",
                  v_score=100, p0=0.85, p1=0.1, p0_bin="0.8-1.0", s_score=185.0)
    assert PromptRecord(**fields).p0_bin == "0.8-1.0"
    with pytest.raises(ValidationError, match="does not hold"):
        PromptRecord(**{**fields, "p0_bin": "0.6-0.8"})
    with pytest.raises(ValidationError, match="alphabetic"):
        PromptRecord(**{**fields, "target_word": "New York"})


def test_spans_cover_the_named_text():
    from flawforge.pressure.prompts import spans

    question, target = "Which city is the capital of France?", "Paris"
    for condition in ("baseline", "negative"):
        prompt = build_prompt(condition, question, target)
        found = {name: prompt[a:b] for name, (a, b) in spans(condition, question, target).items()}
        assert found["q"] == question
        if condition == "baseline":
            assert found == {"q": question, "instr": "Answer with exactly one English word."}
        else:
            assert found["instr"] == 'Do not use the word "Paris" anywhere in your answer.'
            assert found["neg"] == "Do not use" and found["tgt"] == "Paris"


def test_prompts_file_errors_name_the_line(tmp_path):
    from flawforge.errors import FlawforgeError
    from flawforge.pipelines.pressure_study import read_prompts

    good = PromptRecord(prompt_id="a", category="facts", question_text="q?", target_word="Paris", v_score=1, p0=0.5,
                        p1=0.1, p0_bin="0.4-0.6", s_score=51).model_dump_json()
    path = tmp_path / "prompts.jsonl"
    path.write_text(good + "\n" + good.replace('"p0":0.5', '"p0":1.5') + "\n")
    with pytest.raises(FlawforgeError, match=r"prompts.jsonl:2: p0: Input should be less than or equal to 1"):
        read_prompts(str(path))
    path.write_text(good + "\n\n" + good + "\n")
    with pytest.raises(FlawforgeError, match=r":3: prompt_id 'a' appears twice"):
        read_prompts(str(path))
    with pytest.raises(FlawforgeError, match="cannot read prompts file"):
        read_prompts(str(tmp_path / "missing.jsonl"))
    path.write_text(good + "\n")
    assert [r.prompt_id for r in read_prompts(str(path))] == ["a"]
