"""The study's model passes against direct transformers computations on the local model."""
import copy
import io
import json

import pytest
import torch

from flawforge.blobstore.local import LocalBlobStore
from flawforge.inference.hooks import anatomy, eager_attention
from flawforge.inference.patching import PATCH_KINDS, PatchPlan, patch_effects, run_patched, run_source
from flawforge.pipelines.pressure_study import PressureStudyParams
from flawforge.pressure.study_runner import StudyRunner, span_tokens
from flawforge.pressure.prompts import build_prompt
from flawforge.proto.pressure import PromptRecord

pytestmark = pytest.mark.model

RECORDS = [PromptRecord(prompt_id=f"p{i}", category="facts", question_text=q, target_word=x, v_score=0, p0=p0,
                        p1=0.0, p0_bin="0.0-0.2", s_score=0)
           for i, (q, x, p0) in enumerate([("What is the capital of France?", "Paris", 0.1),
                                           ("What color is the sky on a clear day?", "blue", 0.05)])]
TINY = dict(samples=2, greedy_tokens=3, sample_tokens=2, batch_prompts=1, decompose_first=-3, bootstrap_resamples=10)


def runner(lm, backend, root, **changes):
    params = PressureStudyParams(demo=True, **{**TINY, **changes}).passes()
    return StudyRunner(lm, backend, LocalBlobStore(root), "run", params)


def run_all(study: StudyRunner) -> None:
    """What the inference-servers do with a run's work items: every missing batch."""
    batches = study.batches(RECORDS)
    for index in study.missing_batches(RECORDS):
        study.compute_batch(index, batches[index])


def test_trace_blob_matches_a_direct_forward_pass_and_resume_matches_an_uninterrupted_run(study_lm, study_host,
                                                                                          tmp_path):
    # A run that stored its first batch only stands for a killed one: a batch's result is one blob written
    # atomically (beside, then renamed), so a kill leaves a batch either stored whole or not at all.
    backend = study_host.wait()
    whole_run = runner(study_lm, backend, tmp_path / "whole")
    run_all(whole_run)
    whole, _ = whole_run.stored_batches(RECORDS)

    stopped = runner(study_lm, backend, tmp_path / "resumed")
    stopped.compute_batch(0, stopped.batches(RECORDS)[0])
    first_batch = (tmp_path / "resumed" / "run" / "batches" / "00000.json")
    written = first_batch.stat().st_mtime_ns
    resumed = runner(study_lm, backend, tmp_path / "resumed")
    assert resumed.missing_batches(RECORDS) == [1]
    run_all(resumed)
    resumed.compute_batch(0, resumed.batches(RECORDS)[0])  # an item delivered again: the stored batch stands
    again, seconds = resumed.stored_batches(RECORDS)
    assert again == whole and seconds > 0
    assert first_batch.stat().st_mtime_ns == written  # the finished batch was read, not recomputed

    # The negative prompt's blob against one unbatched forward pass with transformers' own outputs.
    record, result = RECORDS[0], whole[0].conditions["negative"]
    data = resumed.store.get(resumed.trace_key("p0", "negative"))
    assert len(data) < 150_000  # what the metrics read at step T (about 110 KB), not the batch's storage
    blob = torch.load(io.BytesIO(data))
    prompt = study_lm.tokenizer(build_prompt("negative", record.question_text, record.target_word))["input_ids"]
    prefix = prompt + result.greedy_ids[:result.T]
    assert blob["input_ids"].tolist() == prefix and blob["prompt_tokens"] == len(prompt) and blob["T"] == result.T
    with torch.inference_mode(), eager_attention(study_lm.model):
        out = study_lm.model(input_ids=torch.tensor([prefix]), output_hidden_states=True, output_attentions=True)
    layers = anatomy(study_lm.model).num_layers
    for layer in range(layers):  # Hugging Face's last hidden state is after the final norm; the blob's is before
        assert torch.allclose(blob["hidden_states"][layer], out.hidden_states[layer][0, -1], atol=1e-4)
    norm = anatomy(study_lm.model).norm
    assert torch.allclose(norm(blob["hidden_states"][layers]), out.hidden_states[layers][0, -1], atol=1e-4)
    for layer in range(layers):
        assert torch.allclose(blob["attentions"][layer], out.attentions[layer][0, :, -1, :len(prompt)], atol=1e-5)
    assert json.loads(json.dumps(result.lens))[-1] == pytest.approx(float(blob["lens"][-1]))
    # The decomposition covers the last three blocks; the last block's output is the final lens reading.
    assert result.decomposition.blocks == [layers - 3, layers - 2, layers - 1]
    assert result.decomposition.p_after_mlp[-1] == pytest.approx(result.lens[-1], abs=1e-6)
    assert result.decomposition.p_in == pytest.approx(result.lens[layers - 3:layers], abs=1e-6)


def tokens(lm, condition: str, record=RECORDS[0]) -> list[int]:
    return lm.tokenizer(build_prompt(condition, record.question_text, record.target_word))["input_ids"]


def plan_for(lm, source_condition: str = "baseline") -> PatchPlan:
    """The study's plan for RECORDS[0], its spans from the study runner."""
    spans = {c: span_tokens(lm.tokenizer, c, RECORDS[0]) for c in ("baseline", "negative")}
    source = spans[source_condition]
    return PatchPlan(source=tokens(lm, source_condition), target=tokens(lm, "negative"),
                     source_instruction=source["instr"], target_instruction=spans["negative"]["instr"],
                     source_question=source["q"], target_question=spans["negative"]["q"])


@torch.inference_mode()
def reference_kv_patch(lm, plan: PatchPlan, pairs: list[tuple[int, int]], block: int) -> torch.Tensor:
    """The reference implementation's patch C/D, computed directly: both prompts' prefixes (all but the last token)
    run with the model's own cache; at `block` the baseline's cached key and value vectors at each pair's source
    index are copied into a copy of the negative's cache at its target index; the negative's last token runs on
    the patched cache. Its next-token probabilities."""
    field = lm.cache_field
    base = getattr(lm.model(input_ids=torch.tensor([plan.source[:-1]]), use_cache=True), field)
    negative = getattr(lm.model(input_ids=torch.tensor([plan.target[:-1]]), use_cache=True), field)
    patched = copy.deepcopy(negative)
    for target, source in pairs:
        patched.layers[block].keys[:, :, target] = base.layers[block].keys[:, :, source]
        patched.layers[block].values[:, :, target] = base.layers[block].values[:, :, source]
    logits = lm.model(input_ids=torch.tensor([plan.target[-1:]]), use_cache=True, **{field: patched}).logits
    return torch.softmax(logits[0, -1].float(), -1)


def test_patch_c_and_d_equal_the_references_cache_copy(study_lm):
    plan = plan_for(study_lm)
    paris = study_lm.tokenizer(" Paris", add_special_tokens=False)["input_ids"]
    blocks = anatomy(study_lm.model).num_layers
    with torch.inference_mode():
        unpatched = torch.softmax(study_lm.model(input_ids=torch.tensor([plan.target])).logits[0, -1].float(), -1)
    for kind, pairs in (("kv_instruction", list(zip(plan.target_instruction, plan.source_instruction))),
                        ("kv_question", list(zip(plan.target_question, plan.source_question)))):
        assert len(pairs) >= 7  # line 1's seven tokens onto the prohibition line's first seven; the question whole
        found = patch_effects(study_lm, plan, PATCH_KINDS[kind], paris, {paris[0]: 1.0}, 2)
        assert found.p_first_orig == pytest.approx(float(unpatched[paris].sum()), abs=1e-5)
        moved = 0.0
        for block in (0, blocks // 2, blocks - 1):
            direct = reference_kv_patch(study_lm, plan, pairs, block)
            assert found.p_first[block] == pytest.approx(float(direct[paris].sum()), abs=1e-5), (kind, block)
            assert found.p[block] == pytest.approx(float(direct[paris[0]]), abs=1e-5)
            top = int(direct.argmax())  # SmolLM2 often ends at once: its continuation is then empty
            assert found.completions[block][:1] == ([] if top in study_lm.eos_ids else [top])
            moved = max(moved, float((direct - unpatched).abs().max()))
        assert moved > 1e-3, kind  # copying the cache changes the prediction: the patch is not a no-op


def test_patching_identical_source_and_target_changes_nothing(study_lm):
    paris = study_lm.tokenizer(" Paris", add_special_tokens=False)["input_ids"]
    plan = plan_for(study_lm, "negative")  # source = target, each span onto itself
    for name, kind in PATCH_KINDS.items():
        if name == "instruction_knockout":
            continue  # hides tokens whatever the source: it is checked below
        effect = patch_effects(study_lm, plan, kind, paris, {paris[0]: 1.0}, 3)
        # Equal up to float rounding: the source runs whole, the patched rows after a shared prefix.
        assert effect.p_first == pytest.approx([effect.p_first_orig] * len(effect.p_first), abs=1e-5), name
        # A and B keep writing the last position's activation over each new token's while continuing, which
        # changes a continuation even from the same prompt; only its first token is the unpatched one.
        kept = 1 if kind.hooks_while_continuing else None
        assert [c[:kept] for c in effect.completions] == [effect.completion_orig[:kept]] * len(effect.completions), name


def module_output(output):
    """A block's or attention module's activation, whether the module returns it alone or first in a tuple."""
    return output[0] if isinstance(output, tuple) else output


@torch.inference_mode()
def reference_held_continuation(lm, source: list[int], target: list[int], module, tokens: int) -> list[int]:
    """The reference's flip continuation, computed directly as it does it: the source's activation at its last
    position (the output of `module`) is written over the target's last position by a forward hook that stays on
    through a greedy loop on the model's own cache, overwriting each new token's. The tokens chosen, the end of
    sequence excluded."""
    kept = {}

    def keep(m, args, out):
        kept["last"] = module_output(out)[0, -1]

    def overwrite(m, args, out):
        value = module_output(out).clone()
        value[0, -1] = kept["last"]
        return (value, *out[1:]) if isinstance(out, tuple) else value

    handle = module.register_forward_hook(keep)
    lm.model(input_ids=torch.tensor([source]))
    handle.remove()
    handle = module.register_forward_hook(overwrite)
    try:
        out = lm.model(input_ids=torch.tensor([target]), use_cache=True)
        chosen = []
        for _ in range(tokens):
            token = int(out.logits[0, -1].argmax())
            if token in lm.eos_ids:
                break
            chosen.append(token)
            out = lm.model(input_ids=torch.tensor([[token]]), use_cache=True,
                           **{lm.cache_field: getattr(out, lm.cache_field)})
    finally:
        handle.remove()
    return chosen


def test_the_flip_continuation_keeps_residual_and_attention_output_patches_on_as_the_reference(study_lm):
    """A and B continue with their hook on (each new token's activation at block b overwritten with the source's
    last one), as the reference continues; C and D leave their patch in the cache alone (checked above)."""
    source = study_lm.tokenizer("The capital of France is")["input_ids"]
    target = study_lm.tokenizer("The capital of Italy is")["input_ids"]
    plan = PatchPlan(source=source, target=target, source_instruction=[], target_instruction=[],
                     source_question=[], target_question=[])
    blocks = anatomy(study_lm.model).layers
    block, tokens, end = len(blocks) // 2, 6, len(target) - 1
    residual, attn_out = PATCH_KINDS["residual"], PATCH_KINDS["attn_out"]
    # A through the study's path (every block patched in turn), B through the patcher with the kind's rule.
    effect = patch_effects(study_lm, plan, residual, [], {target[-1]: 1.0}, tokens)
    assert len(effect.completion_orig) == tokens  # the unpatched prompt goes on for the whole continuation
    kept = run_source(study_lm, source, residual.source_points(len(blocks)) + attn_out.source_points(len(blocks)))
    setters = [[residual.setter(plan, kept, block)], [attn_out.setter(plan, kept, block)]]
    _, [_, held] = run_patched(study_lm, target, end, setters, end, tokens,
                               hooks_while_continuing=attn_out.hooks_while_continuing)
    _, prompt_only = run_patched(study_lm, target, end, setters, end, tokens)  # the hooks off while continuing
    for found, alone, module in ((effect.completions[block], prompt_only[0], blocks[block]),
                                 (held, prompt_only[1], blocks[block].self_attn)):
        direct = reference_held_continuation(study_lm, source, target, module, tokens)
        assert found == direct
        assert alone != direct  # the last position patched alone continues otherwise: the held hook is seen


def test_residual_patch_of_the_last_block_reproduces_the_source_and_the_knockout_moves_the_prediction(study_lm):
    plan = plan_for(study_lm)
    paris = study_lm.tokenizer(" Paris", add_special_tokens=False)["input_ids"]
    last = study_lm.model.config.num_hidden_layers - 1
    found = patch_effects(study_lm, plan, PATCH_KINDS["residual"], paris, {paris[0]: 1.0}, 1)
    assert found.p_first[last] == pytest.approx(found.p_first_source, abs=1e-6)
    # Hiding the prohibition line from the last position at every block moves the prediction; no block hidden
    # leaves the negative prompt's own distribution.
    knockout, source = PATCH_KINDS["instruction_knockout"], run_source(study_lm, plan.source, [])
    setters = [knockout.setter(plan, source, block) for block in range(last + 1)]
    end = len(plan.target) - 1
    probs, _ = run_patched(study_lm, plan.target, end, [[], setters], end)
    with torch.inference_mode():
        alone = study_lm.model(input_ids=torch.tensor([plan.target])).logits[0, -1].float().softmax(-1)
    assert torch.allclose(probs[0], alone, atol=1e-5) and not torch.allclose(probs[1], alone, atol=1e-3)
