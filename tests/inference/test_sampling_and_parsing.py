"""Token choice, batch-file parsing and model resolution: the parts that need no model."""
from __future__ import annotations

import json

import pytest
import torch

from flawforge.errors import ConfigError
from flawforge.inference.batches import parse_input
from flawforge.inference.loading import BUNDLED_NAME, resolve_source
from flawforge.inference.sampling import choose_next, nucleus_candidates


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The nucleus over the whole vocabulary: each token's renormalised probability, zero outside it."""
    tokens, weights = nucleus_candidates(probs, top_p)
    return torch.zeros_like(probs).scatter(-1, tokens, weights)


def test_nucleus_keeps_the_smallest_set_reaching_top_p():
    probs = torch.tensor([0.5, 0.25, 0.125, 0.125])
    assert nucleus(probs, 0.6).tolist() == pytest.approx([2 / 3, 1 / 3, 0, 0])
    assert nucleus(probs, 0.75).tolist() == pytest.approx([2 / 3, 1 / 3, 0, 0])  # 0.5 + 0.25 reaches 0.75
    assert nucleus(probs, 0.76).tolist() == pytest.approx([4 / 7, 2 / 7, 1 / 7, 0])
    assert nucleus(probs, 0.1).tolist() == pytest.approx([1, 0, 0, 0])  # the top token always stays


def test_ranking_by_topk_keeps_the_nucleus_a_full_sort_keeps():
    # Rows peaked and flat enough to need 256 ranked tokens, 4,096, or the whole 49,152-token row.
    logits = torch.randn(12, 49152, generator=torch.Generator().manual_seed(0))
    probs = torch.softmax(logits * torch.tensor([8.0, 6.0, 4.0, 3.0, 2.0, 1.5, 1.0, 0.7, 0.5, 0.3, 0.1, 0.0])[:, None], -1)
    for top_p in (0.5, 0.9, 0.99):
        ranked, order = probs.sort(dim=-1, descending=True, stable=True)
        expected = torch.zeros_like(probs).scatter(-1, order, ranked.masked_fill(ranked.cumsum(-1) - ranked >= top_p, 0))
        expected = expected / expected.sum(-1, keepdim=True)
        assert torch.allclose(nucleus(probs, top_p), expected, atol=1e-7)


def test_choose_next_is_greedy_at_zero_temperature_and_reproducible_with_a_seed():
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3]] * 4))
    assert choose_next(logits, 0, 1.0, torch.Generator().manual_seed(0)).tolist() == [1, 1, 1, 1]
    draws = [choose_next(logits.repeat(50, 1), 1.0, 1.0, torch.Generator().manual_seed(s)).tolist() for s in (5, 5, 6)]
    assert draws[0] == draws[1] != draws[2]
    counts = torch.bincount(choose_next(logits.repeat(500, 1), 1.0, 1.0, torch.Generator().manual_seed(1)), minlength=3)
    assert 0.5 < counts[1] / counts.sum() < 0.7  # about the model's 0.6
    narrow = choose_next(logits.repeat(200, 1), 1.0, 0.5, torch.Generator().manual_seed(2))
    assert set(narrow.tolist()) == {1}  # top_p 0.5 leaves the most likely token alone


def test_parse_input_sorts_lines_into_requests_and_errors():
    good = {"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"model": "m", "prompt": "x"}}
    data = "\n".join([json.dumps(good), "", "[1, 2", json.dumps([1]), json.dumps({**good, "method": "GET"}),
                      json.dumps({**good, "url": "/v1/chat/completions"}), json.dumps(good),
                      json.dumps({**good, "custom_id": "b"})]).encode()
    requests, rejected = parse_input(data, "/v1/completions")
    assert [(n, r.custom_id) for n, r in requests] == [(1, "a"), (8, "b")]
    found = [(r["line"], r["record"]["custom_id"], r["record"]["error"]["code"]) for r in rejected]
    assert found == [(3, None, "invalid_json"), (4, None, "invalid_request"), (5, "a", "invalid_request"),
                     (6, "a", "mismatched_endpoint"), (7, "a", "duplicate_custom_id")]
    assert "method" in rejected[2]["record"]["error"]["message"]
    assert parse_input(b"\xff\xfe\n", "/v1/completions")[1][0]["record"]["error"]["code"] == "invalid_json"


def test_resolve_source_names_the_model_and_refuses_bad_paths(tmp_path):
    bundled = resolve_source("")
    assert bundled.name == BUNDLED_NAME and bundled.is_gguf and bundled.path.is_file()
    assert resolve_source("", "served-as").name == "served-as"
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_source(str(tmp_path / "nothing"))
    with pytest.raises(ConfigError, match="no config.json"):
        resolve_source(str(tmp_path))
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ConfigError, match="not a .gguf file"):
        resolve_source(str(tmp_path / "weights.bin"))
    (tmp_path / "config.json").write_text("{}")
    assert resolve_source(str(tmp_path)).name == tmp_path.name
