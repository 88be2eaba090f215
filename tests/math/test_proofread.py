"""The reviewer's reading of a solution (flawforge.math.proofread): each defect the audit of the generator
found, written by hand, is caught; true text is not flagged; and on every candidate of the shared corpus
nothing is false but a computational candidate's own line, nothing stale, no answer a fraction."""
from __future__ import annotations

from fractions import Fraction

import pytest

from flawforge.math.proofread import (changed_values, check_correct, check_flawed,
                                      line_findings, numbers_in, question_numbers, stale_numbers)
from tests.math.mutation_corpus import corpus_outputs


@pytest.mark.parametrize("line", [
    "$59.5 - $17.5 = $<<59.5-4.5=55>>55",                          # prose contradicts its annotation
    "45 plus 30 plus 50 plus 25 equals <<45+30+25=100>>100",       # ... in words
    "She needs 80 / 3/10 = <<80/(3/10)=800/3>>800/3 cups",         # a written fraction after '/' is a division
    "$150 + $2000 + $120000 * $7200 = $<<(150+2000+120000)*7200=879480000>>879480000",  # precedence changed
    "The cost is 24 / 0.01 = $<<24/0.01=2880>>2880",               # 0.01 is a rounded 1/120
    "<<0.33*90=30>>30",                                            # a rounded operand, however near
    "She bought 5 shorts at $7 each so 5*7=$35<<5*7=35>>35",       # reads "$7 x 5 = $3535"
    "The tip is 15 because 100 x 0.15 = 14",                       # a miscalculation in the prose
    "Wednesday:2(6+12)=38$",                                       # a number before '(' multiplies
    "<<1000+375=1376>>1376",                                       # off by one at any size
    "<<__import__('os')=1>>",                                      # never evaluated, unreadable
    # after "of": the calculation read whole, a share of something multiplied
    "She will sell a total of 10 + 14 * 18 + 22 = <<(10+14)*18+22=454>>454 candies",  # parentheses missing
    "Lyra paid 100% - 20% = 480% of the original price.",          # a result before "of the ..." is a result
    "The tip is 10% of 150 = 16",
    "Half of 24 = 13 eggs",
    # operands written as words
    "He ran three times 4 = 13 miles",
    "4 x two = 9",
    "2/3 of 30 - 5 = 16",
    "There are 7 adults + Shonda (1) + 2 of her kids + 10 of their friends = 18 people",  # units with "of"
    # an operand behind a long name, left stale by a substitution (problems 101 and 212)
    "So she must be applying makeup to 12 tubes of lip gloss * 3 people per tube of lip gloss = <<6*3=18>>18 people.",
    "There are 52 weeks in a year - 2 weeks of vacation Randy plans to take = <<12-2=10>>10 weeks of practice.",
])
def test_false_calculations_are_caught(line):
    assert line_findings(line), line


@pytest.mark.parametrize("line", [
    "The plant supplier earned $50 x 20 = $<<50*20=1000>>1000 for the orchids.",
    "So 100 - 50 = <<100-50=50>>50% are left",                     # percentage points
    "First: 4/5 * 1/4 = 1/5 = 20%",                                # or a percentage
    "There are 60 students x 2/3 = <<60*(2/3)=40>>40 students.",
    "He works 5 hours x $4/hour = $<<5*4=20>>20",                  # units and rates
    "Derek caught 2 * 23 - 4 = 46 - 4 = <<2*23-4=42>>42 balls.",
    "<<10/3=3.33>>3.33",                                           # a result shown rounded
    "<<1,000+250=1,250>> and <<20%*50=10>> and <<7//2=3>> and <<round(10/3,2)=3.33>>",
    "Ann had 3 dozen oatmeal cookies - 2 dozen = <<3-2=1>>1 dozen oatmeal cookies left.",
    "This means that she used 15 gallons – 3 gallons = <<15-3=12>>12 gallons of fuel last week.",
    "We have 2 kg = 2 * 1000 = <<2*1000=2000>>2000 g",             # a conversion
    "Remaining bill paid by 5 friends = 75 + 10% of 150 = 75 + 15 = 90",
    "8*45 = 360 divided by 5 is 360/5 = 72 candles.",
    "Eighteen hours later he arrived at 6:00+18 hours = 00:00 on Tuesday.",
    "Thus 3m = 220 - 10 = 210 pounds",                             # algebra is not arithmetic
    "So far he has spent $7 for his subway fare + $5 on bananas + $10 on kiwis = $7 + $5 + $10 = $<<7+5+10=22>>22",
    "Lyra paid 100% - 20% = 80% of the original price.",
    "The tip is 10% of 150 = 15, and half of 24 = 12 eggs, 2/3 of 30 - 5 = 15",
    "He ran three times 4 = 12 miles, and 4 x two = 8",
    "Wanda brought 90 pieces of bread, three times the number of treats, so 90/3 = <<90/3=30>>30 treats.",
    "They brought a total of 30 treats+60 treats+45 pieces of bread + 90 pieces of bread = <<30+60+45+90=225>>225",
    "He ate 3 of 12 eggs = 1/4 of them",                           # a number taken of another: no arithmetic
    "There are 7 adults + Shonda (1) + 12 of her kids + 10 of their friends = 30 people",
    "So she must be applying makeup to 12 tubes of lip gloss * 3 people per tube of lip gloss = <<12*3=36>>36 people.",
])
def test_true_text_is_not_flagged(line):
    assert not line_findings(line), line_findings(line)


def test_numbers_a_reader_sees():
    found = [(n.text, n.value) for n in numbers_in("Eight gallons, twenty-five cups, 1,591 voters, 3/4 of 48/2")]
    assert sorted(found, key=str) == sorted([("Eight", 8), ("twenty-five", 25), ("1,591", 1591),
                                             ("3/4", Fraction(3, 4)), ("48", 48), ("2", 2)], key=str)


CORRECT = {"voters": 1591, "rate": 0.15, "tip": 15, "gallons": 8, "d1": 800}
SUMMARY = ("District 1 has <<800=800>>800 voters.\nThere are <<800+791=966>>966 voters in all.\n"
           "There are 1591 voters in Districts 1 - 3.\n#### 966")


@pytest.mark.parametrize("text, line, stale", [
    (SUMMARY, 2, "1591"),                                                          # a stale summary line
    ("The tip is 15 because 100 x 0.15 = <<100*0.15=14>>14\n#### 14", 1, "15"),    # a number in template text
    ("<<4*2=7>>7 gallons.\nEight gallons were used.\n#### 7", 1, "Eight"),         # a number word
])
def test_stale_numbers_are_caught(text, line, stale):
    flawed = {**CORRECT, "voters": 966, "tip": 14, "gallons": 7}
    findings = stale_numbers(text, line, changed_values(CORRECT, flawed))
    assert findings and stale in findings[0].text


def test_a_number_the_flaw_kept_or_the_question_states_is_not_stale():
    flawed = {**CORRECT, "voters": 966}
    changed = changed_values(CORRECT, flawed, keep=question_numbers("There are 1591 voters."))
    assert not stale_numbers(SUMMARY, 2, changed)
    assert not stale_numbers(SUMMARY, 2, changed_values(CORRECT, {**flawed, "later": 1591}))


def test_a_candidate_is_read_whole():
    ok = check_flawed("<<2+3=5>>5 cats.\n<<5*2=10>>10 legs.\n#### 10", family="conceptual", erroneous_line="L1",
                      correct={"cats": 4, "legs": 8}, flawed={"cats": 5, "legs": 10})
    assert ok.ok
    computational = dict(family="computational", erroneous_line="L1", correct={"cats": 5, "legs": 10},
                         flawed={"cats": 6, "legs": 12})
    assert check_flawed("<<2+3=6>>6 cats.\n<<6*2=12>>12 legs.\n#### 12", **computational).ok
    assert not check_flawed("<<2+3=6>>6 cats.\n<<6*2=13>>13 legs.\n#### 13", **computational).ok  # not its line
    fraction = check_flawed("<<2+3=5>>5 cats.\n#### 5950/3", family="conceptual", erroneous_line="L1",
                            correct={"a": 4}, flawed={"a": 5})
    assert [f.kind for f in fraction.findings] == ["fraction_answer"]
    assert [f.kind for f in check_correct("$7 x 5 = $<<7*5=35>>3535\n#### 35").findings] == ["false_calculation"]


@pytest.mark.slow
@pytest.mark.timeout(1200)  # generates the whole corpus when no other test of the session has
def test_every_candidate_of_the_corpus_reads_true(shared_data, problems):
    """Zero stale numbers, zero false written calculations but on a computational candidate's own line, zero
    final answers written as fractions, on every candidate of every template of the shared corpus."""
    candidates = [c for output in corpus_outputs(shared_data).values() for c in output.candidates]
    failures = {}
    for c in candidates:
        correct = {step.name: step.value.to_python() for step in c.correct_trace}
        flawed = {step.name: step.value.to_python() for step in c.flawed_trace}
        verdict = check_flawed(c.flawed_solution, family=c.family, erroneous_line=c.erroneous_line_number,
                               correct=correct, flawed=flawed, keep=question_numbers(problems[c.problem_index].question))
        if not verdict.ok:
            failures[c.id] = verdict.reason()
        assert check_correct(c.original_solution).ok, c.id
    assert not failures, list(failures.items())[:5]
    assert len(candidates) > 10_000


def test_mixed_numbers_read_as_one_number():
    """GSM8K writes 1 1/2 and 1 and 1/3: a reader takes each for one number, so these are true, and a wrong
    result after one is still false."""
    for line in ["The third present needs 2 + 1 1/2 = 3 1/2 square feet", "21 x (1 and 1/3) = 28 pages",
                 "so 14 * 1 1/2 = <<14*(3/2)=21>>21 birds"]:
        assert not line_findings(line), (line, line_findings(line))
    for line in ["The third present needs 2 + 1 1/2 = 4 1/2 square feet", "21 x (1 and 1/3) = 29 pages",
                 "so 14 * 1 1/2 = 22 birds", "Day 3 12/4 * 2 = 7"]:
        assert line_findings(line), line
    # a unit's fraction, a share, and what only looks like one ("3 12/4") are read apart, as before
    for line in ["So he needs 12 / 2 = 6 1/2-gallon jugs", "There are 20 + 10 = 30 and 1/3 of them are boys",
                 "Day 3 12/4 * 2 = 6", "On day 2 10/5 + 1 = 3 laps"]:
        assert not line_findings(line), (line, line_findings(line))
