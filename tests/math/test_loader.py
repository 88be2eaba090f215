"""GSM8K reading, tier rules and template discovery, on the shared data and on crafted bad input."""
from __future__ import annotations

import json
import shutil

import pytest

from flawforge.math.gsm8k import GSM8KError, final_answer_text, final_answer_value, read_gsm8k, solution_lines
from flawforge.math.templates import InvalidTemplate, TemplateFolder, TemplateFolderError, parse_logical_steps
from flawforge.math.tiers import has_computational_division, has_float, is_symbolic, tier_of, tiers_by_index


def test_gsm8k_rows_are_problem_indices(problems):
    assert len(problems) == 7473
    assert problems[0].index == 0 and problems[0].question.startswith("Natalia sold clips")
    assert problems[0].final_answer == "72"
    assert all(p.index == i for i, p in enumerate(problems))


def test_final_answer_parsing():
    assert final_answer_text("a\nb\n#### 1,200") == "1,200"
    assert final_answer_value("x #### 1,200") == 1200.0
    assert final_answer_value("x #### -3.5") == -3.5
    assert final_answer_value("x #### five") is None
    assert final_answer_value("no final answer") is None
    with pytest.raises(GSM8KError, match="no '####'"):
        final_answer_text("no final answer")


def test_solution_lines_drop_only_a_numeric_final_line():
    assert solution_lines("He has 2+3=5.\n\n  So 5*2=10.\n#### 10") == {"L1": "He has 2+3=5.", "L2": "So 5*2=10."}
    # the original project kept a final line it did not recognise as a number (e.g. negative answers)
    assert solution_lines("So -5.\n#### -5") == {"L1": "So -5.", "L2": "#### -5"}


@pytest.mark.parametrize("content, message", [
    ('{"question": "q", "answer": "a #### 1"}\nnot json\n', "line 2 is not JSON"),
    ('{"question": "q"}\n', "line 1 needs string fields 'question' and 'answer'"),
    ('[1, 2]\n', "line 1 needs string fields"),
    ("\n\n", "no problems"),
])
def test_bad_gsm8k_files_say_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "train.jsonl"
    path.write_text(content)
    with pytest.raises(GSM8KError, match=message):
        read_gsm8k(path)


def test_missing_gsm8k_file(tmp_path):
    with pytest.raises(GSM8KError, match="GSM8K file not found"):
        read_gsm8k(tmp_path / "absent.jsonl")
    with pytest.raises(GSM8KError, match="cannot read"):
        read_gsm8k(tmp_path)


def test_tier_rules():
    assert (has_computational_division("48/2 = 24"), has_computational_division("48 / 2"),
            has_computational_division("a/b")) == (True, True, False)
    assert (has_float("0.5 x 2"), has_float("costs .25"), has_float("version 2. then")) == (True, True, False)
    assert is_symbolic("Some text\nLet x be the cost.") and not is_symbolic("Lettuce x costs 2")
    assert tier_of("2+3=5") == "tier1"
    assert tier_of("0.5*2=1") == "tier2"
    assert tier_of("6/2=3") == "tier3"
    assert tier_of("4.5/3=1.5") == "tier4"
    assert tier_of("Let x be 6/2.5") == "tier5"


def test_tiers_are_disjoint_and_agree_with_the_template_folders(problems, folder):
    tiers = tiers_by_index(p.answer for p in problems)
    assert sum(len(v) for v in tiers.values()) == len(problems)
    assert {k: len(v) for k, v in tiers.items()} == {"tier1": 2767, "tier2": 837, "tier3": 3113, "tier4": 544,
                                                     "tier5": 212}
    # the original project filed every template under the tier its rules gave the problem
    for index in folder.indices():
        assert folder.tiers_of(index) == [tier_of(problems[index].answer)]


def test_template_folder_discovery(folder):
    assert len(folder.indices()) == 2430
    files = folder.in_preference_order("tier1", 1001, ["openai_gpt-4.1", "google_gemini-2.5-flash"])
    assert [f.model for f in files] == ["openai_gpt-4.1", "google_gemini-2.5-flash"]
    code, steps = files[1].read()
    assert "def solve" in code and steps[0]["line_number"] == "L1"
    assert folder.in_preference_order("tier1", 1001, ["some_other_model"]) == []
    assert folder.in_preference_order("tier2", 1001, ["openai_gpt-4.1"]) == []


def test_bad_template_folders(tmp_path):
    with pytest.raises(TemplateFolderError, match="template folder not found"):
        TemplateFolder(tmp_path / "absent")
    (tmp_path / "tier1" / "notanumber").mkdir(parents=True)
    with pytest.raises(TemplateFolderError, match="no templates in"):
        TemplateFolder(tmp_path)


def test_folder_extent_and_indices_count_only_folders_with_templates(tmp_path):
    for tier, index, files in (("tier1", 3, ("m.py", "m.json")), ("tier2", 9, ("n.py",)), ("tier1", 12, ("notes.txt",)),
                               ("tier3", 1, ())):
        (tmp_path / tier / str(index)).mkdir(parents=True)
        for name in files:
            (tmp_path / tier / str(index) / name).write_text("")
    folder = TemplateFolder(tmp_path)
    assert folder.extent() == range(3, 10)
    assert folder.indices() == [3, 9]
    assert folder.tiers_of(9) == ["tier2"] and folder.tiers_of(12) == [] and folder.tiers_of(4) == []
    assert folder.models("tier2", 9) == {"n"} and folder.models("tier1", 9) == set()

    (tmp_path / "tier1" / "3" / "m.py").unlink()
    (tmp_path / "tier1" / "3" / "m.json").unlink()
    (tmp_path / "tier2" / "9" / "n.py").unlink()
    emptied = TemplateFolder(tmp_path)  # problem folders, none with a template
    shutil.rmtree(tmp_path / "tier2" / "9")
    assert emptied.models("tier2", 9) == set()  # a folder removed after the index was made holds no template
    for asked in (emptied.extent, emptied.indices):
        with pytest.raises(TemplateFolderError, match="no templates in"):
            asked()


def test_bad_template_files(tmp_path):
    (tmp_path / "tier1" / "3").mkdir(parents=True)
    (tmp_path / "tier1" / "3" / "m.py").write_text("def solve():\n    return 1\n")
    folder = TemplateFolder(tmp_path)
    with pytest.raises(InvalidTemplate, match="missing file m.json"):
        folder.files("tier1", 3, "m").read()
    with pytest.raises(InvalidTemplate, match="not JSON"):
        parse_logical_steps("{")
    for text in ("[]", "{}", json.dumps([1])):
        with pytest.raises(InvalidTemplate, match="non-empty JSON list of objects"):
            parse_logical_steps(text)
