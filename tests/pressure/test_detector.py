"""The detector on the seed's cases and, by property, over many tokenizations of the same text."""
import pytest
from hypothesis import given, settings, strategies as st

from flawforge.pressure.detector import MappingError, decision_step, detect, find_word, map_match, token_spans


def chunk_tokenizer(chunks: list[str]):
    """Token i is chunks[i]; decoding joins them."""
    return list(range(len(chunks))), lambda ids: "".join(chunks[i] for i in ids)


@pytest.mark.parametrize("text,found", [
    ("spacetime", False), ("space2", False), ("Space", True), ("space-time", True), ("space.", True),
    (" The SPACE, and", True), ("aerospace", False), ("space_", True), ("spaceé", False), ("2space", False),
])
def test_seed_cases(text, found):
    assert bool(find_word(text, "space")) is found


def test_multi_token_word_maps_to_every_piece_and_t_is_its_first_token():
    ids, decode = chunk_tokenizer([" It", " is", " sp", "ace", "."])
    detection = detect(ids, "space", decode)
    assert detection.tokens == ((2, 3),)
    assert detection.first_token == 2 == decision_step(ids, "space", decode)
    assert decision_step(ids, "time", decode) == 0


def test_every_occurrence_is_found():
    ids, decode = chunk_tokenizer(["Paris", ", paris", "ian", " PARIS"])
    detection = detect(ids, "paris", decode)
    assert [(m.start, m.end) for m in detection.matches] == [(0, 5), (16, 21)]  # not "Parisian"
    assert detection.tokens == ((0,), (3,))


def test_unstable_prefix_decoding_is_widened_or_searched():
    # Byte-level tokens: a prefix ending inside a multi-byte character decodes to a replacement character.
    text = "é space"
    ids = list(text.encode())
    decode = lambda part: bytes(part).decode("utf-8", errors="replace")  # noqa: E731
    detection = detect(ids, "space", decode)
    assert decode(ids[detection.tokens[0][0]:detection.tokens[0][-1] + 1]).strip() == "space"


def test_a_word_no_window_holds_is_a_mapping_error():
    ids, decode = chunk_tokenizer(["space"])
    lying = lambda part: "x" * len(part)  # noqa: E731  (a decoder whose windows never show the word)
    with pytest.raises(MappingError, match="no window"):
        map_match(ids, lying, token_spans(ids, decode), find_word("space", "space")[0], "space")


def reference_matches(text: str, word: str) -> list[tuple[int, int]]:
    """Every whole-word position, by brute force (overlaps cannot occur for a word bounded by non-alphanumerics)."""
    n = len(word)
    return [(i, i + n) for i in range(len(text) - n + 1)
            if text[i:i + n].lower() == word.lower()
            and (i == 0 or not text[i - 1].isalnum()) and (i + n == len(text) or not text[i + n].isalnum())]


pieces = st.sampled_from(["space", "Space", "SPACE", "time", "-", ".", " ", "2", "é", "_", "sp", "ace", "s", "\n", "ß"])


@settings(max_examples=300, deadline=None)
@given(st.lists(pieces, min_size=1, max_size=12), st.data())
def test_matches_and_token_mapping_hold_for_any_tokenization(parts, data):
    text = "".join(parts)
    # Any split of the text into tokens: random cut points.
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=len(text))))
    bounds = [0] + [c for c in cuts if 0 < c < len(text)] + [len(text)]
    ids, decode = chunk_tokenizer([text[a:b] for a, b in zip(bounds, bounds[1:])])
    detection = detect(ids, "space", decode)
    assert [(m.start, m.end) for m in detection.matches] == reference_matches(text, "space")
    for match, tokens in zip(detection.matches, detection.tokens):
        # Exactly the tokens whose character spans intersect the match, contiguous.
        expected = [i for i, (a, b) in enumerate(zip(bounds, bounds[1:])) if a < match.end and b > match.start]
        assert list(tokens) == expected
        assert "space" in decode(ids[tokens[0]:tokens[-1] + 1]).lower()


@settings(max_examples=150, deadline=None)
@given(st.lists(pieces, min_size=1, max_size=10))
def test_byte_level_tokenization_maps_to_tokens_that_decode_to_the_word(parts):
    text = "".join(parts)
    ids = list(text.encode())
    decode = lambda part: bytes(part).decode("utf-8", errors="replace")  # noqa: E731
    detection = detect(ids, "space", decode)
    assert [(m.start, m.end) for m in detection.matches] == reference_matches(text, "space")
    for tokens in detection.tokens:
        assert find_word(decode(ids[tokens[0]:tokens[-1] + 1]), "space")
