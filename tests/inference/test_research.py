"""Research computations against direct transformers computations on the same model."""
from __future__ import annotations

import io

import pytest
import torch

from flawforge.inference import research, research_api
from flawforge.inference.errors import RequestError
from flawforge.inference.hooks import eager_attention
from flawforge.proto.inference import LensRequest, PatchRequest, ScoreRequest, TraceRequest

pytestmark = pytest.mark.model

PROMPTS = ["The capital of France is", "Question: What is two plus two?\nAnswer:", "Hi"]
ATOL = 2e-4


def ids(lm, text: str, *, prompt: bool = True) -> list[int]:
    return lm.tokenizer(text, add_special_tokens=prompt)["input_ids"]


def one(lm, text: str) -> int:
    [token] = ids(lm, text, prompt=False)
    return token


@torch.inference_mode()
def residuals(lm, token_ids: list[int], edits: dict | None = None):
    """Unpadded run of one prompt: the residual stream after the embedding and each block (before the final
    norm), and the logits. `edits` maps a layer to {position: vector} written into that layer's output."""
    model = lm.model
    modules = [model.get_input_embeddings(), *model.model.layers]
    captured = {}

    def hook(layer):
        def run(module, args, output):
            hidden = output[0] if isinstance(output, tuple) else output
            for position, vector in (edits or {}).get(layer, {}).items():
                hidden = hidden.clone()
                hidden[0, position] = vector
            captured[layer] = hidden[0]
            return hidden

        return run

    handles = [m.register_forward_hook(hook(layer)) for layer, m in enumerate(modules)]
    try:
        logits = model(torch.tensor([token_ids])).logits[0]
    finally:
        for handle in handles:
            handle.remove()
    return [captured[layer] for layer in range(len(modules))], logits


def test_score_equals_one_forward_pass_per_continuation(lm, backend):
    request = ScoreRequest(model=lm.name, items=[
        {"prompt": PROMPTS[0], "continuations": [" Paris", " a city in Europe", " Rome.", " the"]},
        {"prompt": PROMPTS[1], "continuations": [" 4", " Four, of course"]},
        {"prompt": PROMPTS[2], "continuations": [" there, how are you?"]},
    ])
    response = research_api.score(backend, request)
    for item, result in zip(request.items, response.results):
        prompt = ids(lm, item.prompt)
        assert result.prompt_tokens == len(prompt)
        for text, scored in zip(item.continuations, result.continuations):
            cont = ids(lm, text, prompt=False)
            with torch.inference_mode():
                logits = lm.model(torch.tensor([prompt + cont])).logits[0].float()
            logprobs = torch.log_softmax(logits, -1)
            direct = [logprobs[len(prompt) + j - 1, token].item() for j, token in enumerate(cont)]
            assert len(scored.token_logprobs) == len(cont)
            assert scored.token_logprobs == pytest.approx(direct, abs=ATOL)
            assert scored.logprob == pytest.approx(sum(direct), abs=ATOL)
    paris, rome = response.results[0].continuations[0], response.results[0].continuations[2]
    assert paris.prob > rome.prob  # the model knows the answer


def test_score_splits_work_across_forward_passes_without_changing_results(lm):
    items = [(ids(lm, p), [ids(lm, " yes", prompt=False), ids(lm, " no way", prompt=False)]) for p in PROMPTS]
    together = research.score_continuations(lm, items, batch_tokens=4096)
    one_by_one = research.score_continuations(lm, items, batch_tokens=1)
    for a, b in zip(together, one_by_one):
        for x, y in zip(a, b):
            assert x == pytest.approx(y, abs=ATOL)


def test_logit_lens_reads_every_layer_through_the_final_norm(lm):
    targets = [" Paris", " the"]
    response = research_api.logit_lens(lm, LensRequest(model=lm.name, prompts=PROMPTS[:2], targets=targets,
                                                        position=-1), batch_tokens=2048)
    target_ids = [one(lm, t) for t in targets]
    layers = lm.model.config.num_hidden_layers
    model = lm.model
    for text, result in zip(PROMPTS[:2], response.results):
        token_ids = ids(lm, text)
        with torch.inference_mode():
            out = model(torch.tensor([token_ids]), output_hidden_states=True)
            # Hugging Face's last hidden state already has the final norm applied; the others do not.
            direct = [torch.softmax(model.lm_head(model.model.norm(h[0, -1])).float(), -1)
                      for h in out.hidden_states[:-1]] + [torch.softmax(out.logits[0, -1].float(), -1)]
        assert result.position == len(token_ids) - 1
        assert len(result.layers) == layers + 1
        for layer, readout in enumerate(result.layers):
            assert readout.probs == pytest.approx(direct[layer][target_ids].tolist(), abs=ATOL)
            assert readout.top_prob == pytest.approx(direct[layer].max().item(), abs=ATOL)
    assert response.results[0].layers[-1].top_token == " Paris"


def test_logit_lens_at_an_inner_position_and_bad_targets(lm):
    [(position, readings)] = research.logit_lens(lm, [ids(lm, PROMPTS[0])], [one(lm, " of")], 1, 2048)
    hidden, logits = residuals(lm, ids(lm, PROMPTS[0]))
    assert position == 1
    assert readings[-1].probs[0] == pytest.approx(torch.softmax(logits[1].float(), -1)[one(lm, " of")].item(),
                                                  abs=ATOL)
    with pytest.raises(RequestError, match="' Parisian cafe' is 4 tokens") as bad_target:
        research_api.logit_lens(lm, LensRequest(model=lm.name, prompts=["x"], targets=[" Parisian cafe"]), 2048)
    assert (bad_target.value.http_status, bad_target.value.param) == (400, "targets.0")
    with pytest.raises(RequestError, match="position") as bad_position:
        research_api.logit_lens(lm, LensRequest(model=lm.name, prompts=["Hi"], targets=[5], position=7), 2048)
    assert bad_position.value.param == "position"


def test_patching_every_layer_with_the_source_equal_to_the_target_changes_nothing(lm):
    response = research_api.patch(lm, PatchRequest(model=lm.name, source=PROMPTS[0], target=PROMPTS[0],
                                                   targets=[" Paris", " Rome"], mode="together"), 2048)
    [patched] = response.patched
    assert patched.layers == list(range(lm.model.config.num_hidden_layers + 1))
    assert patched.probs == pytest.approx(response.baseline.probs, abs=1e-6)
    assert max(abs(d) for d in patched.delta) < 1e-6


def test_patch_equals_a_direct_hooked_run(lm):
    source, target = "The capital of Italy is", "The capital of France is"
    response = research_api.patch(lm, PatchRequest(model=lm.name, source=source, target=target,
                                                   targets=[" Paris", " Rome"], layers=[0, 6, 18, 30],
                                                   positions=[3, -1], mode="each"), 2048)
    source_ids, target_ids = ids(lm, source), ids(lm, target)
    hidden, _ = residuals(lm, source_ids)
    _, baseline = residuals(lm, target_ids)
    tokens = [one(lm, " Paris"), one(lm, " Rome")]
    base_probs = torch.softmax(baseline[-1].float(), -1)[tokens]
    assert response.baseline.probs == pytest.approx(base_probs.tolist(), abs=ATOL)
    for layer, patched in zip([0, 6, 18, 30], response.patched):
        assert patched.layers == [layer]
        edits = {layer: {3: hidden[layer][3], len(target_ids) - 1: hidden[layer][len(source_ids) - 1]}}
        _, logits = residuals(lm, target_ids, edits)
        direct = torch.softmax(logits[-1].float(), -1)[tokens]
        assert patched.probs == pytest.approx(direct.tolist(), abs=ATOL)
        assert patched.delta == pytest.approx((direct - base_probs).tolist(), abs=ATOL)
    # Patching the last position's final residual stream makes the target predict what the source does.
    assert response.patched[-1].top_token == " Rome"
    assert response.patched[-1].delta[1] > 0.2


def test_patch_rejects_positions_outside_the_prompts(lm):
    with pytest.raises(RequestError, match="equal length"):
        research_api.patch(lm, PatchRequest(model=lm.name, source="Hi", target=PROMPTS[0], targets=[5]), 2048)
    with pytest.raises(RequestError, match="layers"):
        research_api.patch(lm, PatchRequest(model=lm.name, source="Hi", target="Yo", targets=[5], layers=[31]), 2048)


def test_trace_stores_every_layer_and_the_asked_attention_rows_in_the_blob_store(lm, tmp_path):
    from flawforge.blobstore.local import LocalBlobStore

    store = LocalBlobStore(tmp_path)
    full = TraceRequest(model=lm.name, prompts=PROMPTS[:2], full_sequence=True, attention_positions=256)
    response = research_api.trace(lm, store, full, 2048, 1 << 30)
    assert response.model_revision == lm.revision and lm.revision.startswith("sha256:")
    assert lm.model.config._attn_implementation != "eager"  # restored after the trace
    layers = lm.model.config.num_hidden_layers
    for text, result in zip(PROMPTS[:2], response.results):
        token_ids = ids(lm, text)
        saved = torch.load(io.BytesIO(store.get_verified(result.blob)), weights_only=True)
        assert result.blob.key.endswith(".pt") and result.num_layers == layers
        assert saved["input_ids"].tolist() == token_ids and saved["positions"] == list(range(len(token_ids)))
        assert saved["model_revision"] == lm.revision and saved["attention_positions"] == saved["positions"]
        hidden, logits = residuals(lm, token_ids)
        assert saved["hidden_states"].shape == (layers + 1, len(token_ids), lm.model.config.hidden_size)
        for layer in range(layers + 1):
            torch.testing.assert_close(saved["hidden_states"][layer], hidden[layer].float(), atol=2e-3, rtol=1e-4)
        with eager_attention(lm.model), torch.inference_mode():
            attentions = lm.model(torch.tensor([token_ids]), output_attentions=True).attentions
        torch.testing.assert_close(saved["attentions"], torch.stack([a[0] for a in attentions]), atol=1e-5, rtol=1e-4)
        assert result.next_token_id == int(logits[-1].argmax())
        assert result.next_token_prob == pytest.approx(torch.softmax(logits[-1].float(), -1).max().item(), abs=ATOL)

    last_only = research_api.trace(lm, store, TraceRequest(model=lm.name, prompts=[PROMPTS[1]]), 2048,
                                   1 << 30).results[0]
    saved = torch.load(io.BytesIO(store.get(last_only.blob.key)), weights_only=True)
    n = len(ids(lm, PROMPTS[1]))
    assert last_only.positions == [n - 1]
    assert saved["hidden_states"].shape[1] == 1 and saved["attentions"].shape[2:] == (1, n)
    # The cap is checked before any work, with the size the trace would take: linear in the length.
    with pytest.raises(RequestError, match="over the cap of 1 MiB"):
        research_api.trace(lm, store, TraceRequest(model=lm.name, prompts=["word " * 1000], full_sequence=True),
                           2048, 1 << 20)
    assert research.trace_bytes(30, 9, 576, 2048, 1) == 2 * research.trace_bytes(30, 9, 576, 1024, 1)
