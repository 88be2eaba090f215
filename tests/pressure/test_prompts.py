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
