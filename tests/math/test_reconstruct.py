"""Solution text that tells the truth: rendering, annotation checks, and every candidate of the corpus."""
from __future__ import annotations

import re
from fractions import Fraction

import pytest

from flawforge.math.display import show, show_answer
from flawforge.math.generate import generate_for_problem
from flawforge.math.gsm8k import numbered_lines
from flawforge.math.mutations import REGISTRY
from flawforge.math.program import BoundProgram, Program
from flawforge.math.proofread import check_correct, false_statements
from flawforge.math.reconstruct import SIGNS, WORDS, SolutionWriter, Styles, Unrenderable, final_answer_line, render
from flawforge.math.selection import NO_CAPS
from flawforge.proto.math import ProblemTemplate

from tests.math.mutation_corpus import corpus_outputs
from tests.math.visible_arithmetic import false_calculations, fraction_results, improper_fraction_results


# --- values and fields ------------------------------------------------------------------------
def test_values_print_as_a_solution_writes_them():
    assert show(55.0) == "55" and show(13.5) == "13.5" and show(0.125) == "0.125"
    assert show(10 / 3) == "3.33"  # only what needs more than four decimals is rounded
    assert show(Fraction(3, 2)) == "3/2" and show(Fraction(6, 3)) == "2" and show(-4) == "-4"


def test_fields_are_filled_the_way_the_template_asks():
    values = {"share": 0.25, "part": Fraction(3, 4), "rate": 0.5, "count": 8.0}
    assert render("{share:.0%} off", values) == "25% off"
    assert render("{part.numerator} of {part.denominator}", values) == "3 of 4"  # the original crashed here
    assert render("{rate*100}% of {count}", values) == "50% of 8"
    assert render("{int(count)} {{literal}}", values) == "8 {literal}"
    with pytest.raises(Unrenderable, match="no value for placeholder"):
        render("{missing}", values)
    with pytest.raises(Unrenderable):
        render("{__import__('os').getcwd()}", values)


def test_fractions_and_negatives_keep_their_meaning_inside_annotations_and_after_a_division():
    line = render("{a} / {b} = <<{a}/{b}={c}>>{c}", {"a": 20, "b": Fraction(4, 5), "c": Fraction(25)})
    assert line == "20 / (4/5) = <<20/(4/5)=25>>25"  # "20 / 4/5" reads (20 / 4) / 5
    assert not false_statements(line)
    assert render("{a} x {b} = {c}", {"a": 20, "b": Fraction(4, 5), "c": 16}) == "20 x 4/5 = 16"
    assert not false_statements(render("<<{a}-{b}={c}>>", {"a": 3, "b": -5, "c": 8}))


def test_final_answers_are_never_fractions():
    assert show_answer(Fraction(64, 5)) == "12.8" and show_answer(Fraction(-7, 4)) == "-1.75"
    assert show_answer(Fraction(1, 81)) is None and show_answer(7) == "7" and show_answer(2.5) == "2.5"


# --- small problems through the real sandbox --------------------------------------------------
PLANT_CODE = '''def solve():
    # L1
    orchid_price = 50
    orchids_sold = 20
    orchid_earnings = orchid_price * orchids_sold
    # L2
    plant_price = 25
    plants_sold = 15
    plant_earnings = plant_price * plants_sold
    # L3
    total_earnings = orchid_earnings + plant_earnings
    # FA
    answer = total_earnings
    return answer
'''
PLANT_STEPS = [
    {"line_number": "L1", "question_inputs": ["orchid_price", "orchids_sold"], "WK_inputs": [],
     "output_variable": "orchid_earnings",
     "solution_line_template": "He earned ${orchid_price} x {orchids_sold} = $<<{orchid_price}*{orchids_sold}="
                               "{orchid_earnings}>>{orchid_earnings} for the orchids."},
    {"line_number": "L2", "question_inputs": ["plant_price", "plants_sold"], "WK_inputs": [],
     "output_variable": "plant_earnings",
     "solution_line_template": "He earned {plant_price} times {plants_sold} dollars, that is <<{plant_price}*"
                               "{plants_sold}={plant_earnings}>>{plant_earnings}, for the plants."},
    {"line_number": "L3", "question_inputs": [], "WK_inputs": [], "output_variable": "total_earnings",
     "solution_line_template": "So he earned ${orchid_earnings} + ${plant_earnings} = $<<{orchid_earnings}+"
                               "{plant_earnings}={total_earnings}>>{total_earnings}."},
]


def plant_template(**changes) -> ProblemTemplate:
    fields = dict(problem_index=1001, tier="tier1", template_model="test", question="?", gsm8k_answer="#### 1375",
                  final_answer="1375", code=PLANT_CODE, logical_steps=PLANT_STEPS)
    return ProblemTemplate(**{**fields, **changes})


def test_operator_swap_changes_the_operator_in_the_text(sandbox):
    output = generate_for_problem(plant_template(), sandbox, ["conceptual"], seed=3)
    swaps = [c for c in output.candidates if c.error_type == "operator_swap"]
    assert swaps
    for c in swaps:
        step = int(c.erroneous_line_number[1:])
        prose = c.flawed_solution.splitlines()[first_changed_line(c)].split("<<")[0]
        old, new = c.mutation["old"], c.mutation["new"]
        written_as_word = step == 2  # "{plant_price} times {plants_sold}"
        assert (WORDS[new][0] if written_as_word else SIGNS[new][0]) in prose
        assert (WORDS[old][0] if written_as_word else f" {SIGNS[old][0]} ") not in prose.replace(" x ", " * ")
        assert not false_statements(c.flawed_solution)


def test_the_seed_example_reads_as_what_was_computed(sandbox):
    output = generate_for_problem(plant_template(), sandbox, ["conceptual"], seed=3, caps=NO_CAPS)
    lines = {c.flawed_solution.splitlines()[2] for c in output.candidates
             if c.error_type == "operator_swap" and c.erroneous_line_number == "L3"}
    # $1000 * $375 is no candidate: its answer is far outside the story's numbers
    assert lines == {"So he earned $1000 - $375 = $<<1000-375=625>>625."}


def test_reported_intermediate_ends_the_solution_at_its_step(sandbox):
    output = generate_for_problem(plant_template(), sandbox, ["conceptual"], seed=3)
    chosen = [c for c in output.candidates if c.error_type == "incorrect_final_answer_selection"]
    assert chosen
    for c in chosen:
        selected = c.mutation["selected"]
        lines = c.flawed_solution.splitlines()
        assert c.erroneous_line_number == "FA"
        assert lines[-1] == f"#### {show_answer(c.flawed_final_answer.to_python())}"
        assert lines[:-1] == c.original_solution.splitlines()[:len(lines) - 1]
        assert {"orchid_earnings": 1, "plant_earnings": 2}[selected] == len(lines) - 1


def test_a_text_that_cannot_show_the_change_drops_the_candidate(sandbox):
    # the operands are written side by side with no operator a swap could change
    steps = [dict(PLANT_STEPS[0], solution_line_template="Orchids: {orchid_price}({orchids_sold})={orchid_earnings}"),
             *PLANT_STEPS[1:]]
    output = generate_for_problem(plant_template(logical_steps=steps), sandbox, ["conceptual"], seed=3)
    assert not [c for c in output.candidates if c.error_type == "operator_swap" and c.erroneous_line_number == "L1"]


def test_computational_candidate_miscalculates_one_line_and_carries_it(sandbox):
    output = generate_for_problem(plant_template(), sandbox, ["computational"], seed=3)
    assert output.candidates
    for c in output.candidates:
        check_computational(c)


# --- what a flaw's text says, on small real programs -------------------------------------------
def written(sandbox, code: str, templates: dict[str, str], mutation: str, params: dict,
            original: str = "") -> tuple[str, str]:
    """(correct solution, flawed solution) of one edit of `mutation`, the one with `params`, on a program whose
    solution lines are `templates` (by label); `original` stands for the GSM8K solution."""
    steps = [{"line_number": label, "question_inputs": [], "WK_inputs": [], "solution_line_template": text}
             for label, text in templates.items()]
    program = Program.parse(code, steps)
    run = sandbox.trace_call(code, "solve")
    bound = BoundProgram.bind(program, run.trace, run.return_value.to_python())
    writer = SolutionWriter(program, bound.final_values, bound.answer,
                            {label: line for label, line in numbered_lines(original).items() if label != "FA"})
    site, edit = next((site, edit) for site in bound.sites for edit in REGISTRY[mutation].edits(site)
                      if all(edit.params.get(key) == value for key, value in params.items()))
    flawed = bound.predict(site, edit.value_in(site.scope))
    return writer.solution, writer.write(flawed.values, flawed.answer, step=edit.text.erroneous_line(site),
                                         change=edit.text, target=site.target, expression=edit.expression)


CAKES = """def solve():
    # L1
    trays = 7
    cakes_per_tray = 2
    days = 3
    cakes = trays * cakes_per_tray * days
    # FA
    answer = cakes
    return answer
"""


def test_a_swapped_operation_is_written_with_the_parentheses_it_computes(sandbox):
    line = "She bakes {trays} x {cakes_per_tray} x {days} = <<{trays}*{cakes_per_tray}*{days}={cakes}>>{cakes} cakes."
    correct, flawed = written(sandbox, CAKES, {"L1": line}, "operator_swap",
                              {"left": "trays", "right": "cakes_per_tray", "new": "+"})
    assert correct.splitlines()[0] == "She bakes 7 x 2 x 3 = <<7*2*3=42>>42 cakes."
    # not "7 + 2 x 3 = 27", which reads 13
    assert flawed.splitlines()[0] == "She bakes (7 + 2) x 3 = <<(7+2)*3=27>>27 cakes."
    # units after an operand stay inside its parentheses
    line = "{trays} trays x {cakes_per_tray} cakes x {days} = <<{trays}*{cakes_per_tray}*{days}={cakes}>>{cakes}"
    _, flawed = written(sandbox, CAKES, {"L1": line}, "operator_swap",
                        {"left": "trays", "right": "cakes_per_tray", "new": "+"})
    assert flawed.splitlines()[0] == "(7 trays + 2 cakes) x 3 = <<(7+2)*3=27>>27"
    assert not false_statements(flawed) and not any(map(false_calculations, flawed.splitlines()))


PLAY = """def solve():
    # L1
    hours_per_day = 5
    days = 7
    weeks = 3
    hours = hours_per_day * days
    # L2
    total = hours * weeks
    # FA
    answer = total
    return answer
"""


def test_a_misread_number_changes_the_calculation_not_what_the_line_restates(sandbox):
    lines = {"L1": "Tobias played for {days} days, so he played {hours_per_day} * {days} = "
                   "<<{hours_per_day}*{days}={hours}>>{hours} hours.",
             "L2": "In {weeks} weeks of {days} days he played {hours} * {weeks} = <<{hours}*{weeks}={total}>>{total} "
                   "hours."}
    _, flawed = written(sandbox, PLAY, lines, "input_misrepresentation", {"operand": "days", "replacement": "weeks"})
    # the days stay 7 where the line says how long he played, as the next line says: only the product reads 3
    assert flawed.splitlines()[:2] == ["Tobias played for 7 days, so he played 5 * 3 = <<5*3=15>>15 hours.",
                                       "In 3 weeks of 7 days he played 15 * 3 = <<15*3=45>>45 hours."]
    # an operand the template writes as a number is misread as well
    lines["L1"] = lines["L1"].replace("{hours_per_day} * {days} =", "{hours_per_day} * 7 =")
    _, flawed = written(sandbox, PLAY, lines, "input_misrepresentation", {"operand": "days", "replacement": "weeks"})
    assert flawed.splitlines()[0] == "Tobias played for 7 days, so he played 5 * 3 = <<5*3=15>>15 hours."


SEEDS = """from fractions import Fraction

def solve():
    # L1
    seeds = 30
    rate = Fraction(4, 5)
    plants = rate * seeds
    # L2
    pots = 4
    per_pot = plants / pots
    # FA
    answer = per_pot
    return answer
"""
SEEDS_LINES = {"L1": "At a germination rate of {rate}, {seeds} seeds yield {rate}*{seeds}=<<{rate}*{seeds}={plants}>>"
                     "{plants} plants.",
               "L2": "Each of the {pots} pots gets {plants}/{pots}=<<{plants}/{pots}={per_pot}>>{per_pot} plants."}
SEEDS_ORIGINAL = ("At a germination rate of 80%, 30 seeds will yield 80/100*30=<<80/100*30=24>>24 plants.\n"
                  "Each of the 4 pots gets 24/4=<<24/4=6>>6 plants.\n#### 6")


def test_values_are_written_as_the_original_writes_them(sandbox):
    correct, flawed = written(sandbox, SEEDS, SEEDS_LINES, "operator_swap", {"left": "rate", "new": "+"},
                              SEEDS_ORIGINAL)
    # the original writes the rate as a percentage in prose and over 100 in its calculation, and decimals, never an
    # improper fraction
    assert correct.splitlines()[0] == ("At a germination rate of 80%, 30 seeds yield 80%*30=<<(80/100)*30=24>>24 "
                                       "plants.")
    assert flawed.splitlines()[0] == ("At a germination rate of 80%, 30 seeds yield 80%+30="
                                      "<<(80/100)+30=30.8>>30.8 plants.")
    assert flawed.splitlines()[1] == "Each of the 4 pots gets 30.8/4=<<30.8/4=7.7>>7.7 plants."
    assert not improper_fraction_results(flawed) and not false_statements(flawed)
    # a value with no decimal a student would write (30.8 / 3) makes the candidate unrenderable, not a fraction
    with pytest.raises(Unrenderable, match="no decimal"):
        written(sandbox, SEEDS.replace("pots = 4", "pots = 3"), SEEDS_LINES, "operator_swap",
                {"left": "rate", "new": "+"}, SEEDS_ORIGINAL.replace("4 pots gets 24/4=<<24/4=6>>6", "3 pots gets "
                                                                     "24/3=<<24/3=8>>8").replace("#### 6", "#### 8"))
    # where the original writes the rate as a fraction, the template's fractions stay
    correct, _ = written(sandbox, SEEDS, SEEDS_LINES, "operator_swap", {"left": "rate", "new": "+"},
                         SEEDS_ORIGINAL.replace("80%", "4/5"))
    assert correct.splitlines()[0].startswith("At a germination rate of 4/5, 30 seeds yield 4/5*30=")


RAISE = """from fractions import Fraction

def solve():
    # L1
    salary = 500
    rate = Fraction(6, 100)
    pay_raise = salary * rate
    # L2
    new_salary = salary + pay_raise
    # FA
    answer = new_salary
    return answer
"""
RAISE_LINES = {"L1": "Ruiz has ${salary} x {rate} = $<<{salary}*{rate}={pay_raise}>>{pay_raise} salary raise.",
               "L2": "Thus, his new salary is ${salary} + ${pay_raise} = $<<{salary}+{pay_raise}={new_salary}>>"
                     "{new_salary}."}
RAISE_ORIGINAL = ("Ruiz has $500 x 6/100 = $<<500*6/100=30>>30 salary raise.\n"
                  "Thus, his new salary is $500 + $30 = $<<500+30=530>>530.\n#### 530")


def test_a_fraction_the_original_writes_in_other_terms_is_written_in_them(sandbox):
    """GSM8K writes a rate of 6% as 6/100: the solution too, never 3/50, and a changed rate over 100 where it can be."""
    correct, flawed = written(sandbox, RAISE, RAISE_LINES, "operator_swap", {"new": "-"}, RAISE_ORIGINAL)
    assert correct.splitlines()[0] == flawed.splitlines()[0] == ("Ruiz has $500 x 6/100 = $<<500*(6/100)=30>>30 "
                                                                 "salary raise.")
    assert flawed.splitlines()[1] == "Thus, his new salary is $500 - $30 = $<<500-30=470>>470."
    assert not false_statements(correct) and not false_statements(flawed)
    styles = Styles({"rate": Fraction(3, 50)}, RAISE_ORIGINAL)
    assert [styles.show("rate", value, prose) for value, prose in
            [(Fraction(3, 50), True), (Fraction(3, 50), False), (Fraction(7, 100), True), (Fraction(1, 3), True)]] == [
        "6/100", "6/100", "7/100", "1/3"]  # a value with no such terms keeps its own


PRICE = """def solve():
    # L1
    price = 80
    discount = 20
    paid = price - discount
    # FA
    answer = paid
    return answer
"""


def test_money_stays_money_where_the_template_dropped_its_dollar_sign(sandbox):
    line = "He pays ${price} - ${discount} = <<{price}-{discount}={paid}>>{paid}."
    correct, flawed = written(sandbox, PRICE, {"L1": line}, "operator_swap", {"new": "+"},
                              "He pays $80 - $20 = $<<80-20=60>>60.\n#### 60")
    assert correct.splitlines()[0] == "He pays $80 - $20 = $<<80-20=60>>60."
    assert flawed.splitlines()[0] == "He pays $80 + $20 = $<<80+20=100>>100."


# --- every candidate of the corpus ------------------------------------------------------------
def first_changed_line(candidate) -> int:
    """0-based index of the first solution line the flaw changed (step numbers need not start at L1)."""
    original, flawed = candidate.original_solution.splitlines(), candidate.flawed_solution.splitlines()
    return next(k for k, (a, b) in enumerate(zip(original, flawed)) if a != b)


def check_computational(c) -> None:
    original, flawed = c.original_solution.splitlines(), c.flawed_solution.splitlines()
    assert len(original) == len(flawed)
    first_changed = first_changed_line(c)
    false_lines = {finding.line - 1 for finding in false_statements(c.flawed_solution)}
    assert false_lines == {first_changed}, (c.id, false_statements(c.flawed_solution))
    # the wrong value is shown where it was computed and used from there on (a fraction as a decimal where the
    # original writes decimals)
    wrong = "|".join(re.escape(shown) for shown in {show(c.flawed_value.to_python()),
                                                      show_answer(c.flawed_value.to_python())} if shown)
    assert re.search(rf"=(?:{wrong})>>", flawed[first_changed])
    assert flawed[-1] == f"#### {show_answer(c.flawed_final_answer.to_python())}"


@pytest.fixture(scope="module")
def corpus(shared_data):
    return corpus_outputs(shared_data)


@pytest.mark.slow
def test_every_solution_of_the_corpus_tells_the_truth(corpus):
    checked = 0
    for output in corpus.values():
        for c in output.candidates:
            assert check_correct(c.original_solution).ok, c.id
            assert final_answer_line(c.original_solution) == show(c.correct_final_answer.to_python())
            assert final_answer_line(c.flawed_solution) == show_answer(c.flawed_final_answer.to_python())
            if c.family == "conceptual":
                assert not false_statements(c.flawed_solution), (c.id, false_statements(c.flawed_solution))
            else:
                check_computational(c)
            checked += 1
    assert checked > 10_000


@pytest.mark.slow
def test_a_second_reader_finds_the_text_of_the_corpus_true_and_written_as_the_original_writes(corpus, problems):
    """tests/math/visible_arithmetic.py, written apart from the proofreader the generator uses, reads every
    annotation and visible calculation: none is false but a computational slip's own line, a swap's text carries
    the parentheses it needs, and no result is an improper fraction where the original writes no fraction."""
    false, improper, grouped = [], [], 0
    for output in corpus.values():
        for c in output.candidates:
            lines = c.flawed_solution.splitlines()[:-1]
            for number, line in enumerate(lines, start=1):
                if not (c.family == "computational" and c.erroneous_line_number == f"L{number}"):
                    false += [(c.id, c.error_type, finding) for finding in false_calculations(line)]
            # neither the GSM8K solution (its prose or mixed numbers, "1 1/2") nor the template writes fractions
            written_as_fractions = re.search(r"\d+/\d+", problems[c.problem_index].answer) or fraction_results(
                c.original_solution)
            if improper_fraction_results(c.flawed_solution) and not written_as_fractions:
                improper.append((c.id, improper_fraction_results(c.flawed_solution)))
            if c.error_type == "operator_swap":
                changed = first_changed_line(c)
                grouped += c.flawed_solution.splitlines()[changed].count("(") > \
                    c.original_solution.splitlines()[changed].count("(")
    assert not false, (len(false), false[:5])
    assert not improper, (len(improper), improper[:5])
    assert grouped > 10  # swaps whose text needed parentheses got them (and read true above)


@pytest.mark.slow
def test_operator_swaps_of_the_corpus_never_keep_the_old_operator(corpus):
    for output in corpus.values():
        for c in output.candidates:
            if c.error_type != "operator_swap":
                continue
            values = {s.name: s.value.to_python() for s in c.flawed_trace}
            number = first_changed_line(c)
            original, flawed = c.original_solution.splitlines()[number], c.flawed_solution.splitlines()[number]
            left, right = re.escape(show(values[c.mutation["left"]])), re.escape(show(values[c.mutation["right"]]))
            old = "|".join(re.escape(t) for t in SIGNS[c.mutation["old"]] + WORDS[c.mutation["old"]])
            # overlapping matches: "90+90+90" writes "90+90" twice
            stale = re.compile(rf"(?=(?<![\d.]){left}\s*(?:{old})\s*\$?{right}(?![\d.]))")
            # where the text wrote the operation, it now writes another one (equal values may repeat elsewhere)
            written, still = len(stale.findall(original)), len(stale.findall(flawed))
            assert still == 0 or still < written, (c.id, flawed)


BIRDSEED = """from fractions import Fraction

def solve():
    # L1
    bought = 2
    stolen = Fraction(1, 2)
    eaten = bought - stolen
    # L2
    birds_per_cup = 14
    birds = birds_per_cup * eaten
    # FA
    answer = birds
    return answer
"""
BIRDSEED_LINES = {
    "L1": "The squirrel steals {stolen} cup of birdseed every week, so the birds eat {bought} - {stolen} = "
          "<<{bought}-{stolen}={eaten}>>{eaten} cups of birdseed.",
    "L2": "Each cup feeds {birds_per_cup} birds, so the feeder feeds {birds_per_cup} * {eaten} = "
          "<<{birds_per_cup}*{eaten}={birds}>>{birds} birds weekly.",
}
BIRDSEED_ORIGINAL = """The squirrel steals 1/2 cup of birdseed every week, so the birds eat 2 - 1/2 = 1 1/2 cups of birdseed.
Each cup feeds 14 birds, so Ivan's bird feeder feeds 14 * 1 1/2 = 21 birds weekly.
#### 21"""


def test_a_value_the_original_writes_as_a_mixed_number_is_written_so(sandbox):
    """GSM8K problem 802 writes 1 1/2 cups: the text does too, in both solutions (never "3/2 cups"), and a reader
    takes "14 * 1 1/2 = 21" for a true calculation; an original that writes 1 and 1/3 keeps its " and "."""
    correct, flawed = written(sandbox, BIRDSEED, BIRDSEED_LINES, "off_by_n", {}, BIRDSEED_ORIGINAL)  # miscounts L2
    assert "2 - 1/2 = <<2-(1/2)=3/2>>1 1/2 cups" in correct and "14 * 1 1/2 = <<14*(3/2)=21>>21 birds" in correct
    assert "3/2 cups" not in flawed and not false_statements(correct)
    anded, _ = written(sandbox, BIRDSEED, BIRDSEED_LINES, "off_by_n", {}, BIRDSEED_ORIGINAL.replace("1 1/2", "1 and 1/2"))
    assert "<<2-(1/2)=3/2>>1 and 1/2 cups" in anded and "14 * 1 and 1/2 = " in anded
    # a flawed value that is a fraction is written as a mixed number too
    _, swapped = written(sandbox, BIRDSEED, BIRDSEED_LINES, "operator_swap", {"new": "+"}, BIRDSEED_ORIGINAL)
    assert "2 + 1/2 = <<2+(1/2)=5/2>>2 1/2 cups" in swapped and "14 * 2 1/2 = <<14*(5/2)=35>>35 birds" in swapped
    assert not false_statements(swapped)
