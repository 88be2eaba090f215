"""The study's model passes against direct transformers computations on the local model."""
import io
import json

import pytest
import torch

from flawforge.blobstore.local import LocalBlobStore
from flawforge.inference import study
from flawforge.inference.research import anatomy, eager_attention
from flawforge.pipelines.pressure_study import PressureStudyParams
from flawforge.pressure.prompts import build_prompt
from flawforge.pipelines.pressure_study_runner import StopRequested, StudyRunner
from flawforge.proto.pressure import PromptRecord

pytestmark = pytest.mark.model

RECORDS = [PromptRecord(prompt_id=f"p{i}", category="facts", question_text=q, target_word=x, v_score=0, p0=p0,
                        p1=0.0, p0_bin="0.0-0.2", s_score=0)
           for i, (q, x, p0) in enumerate([("What is the capital of France?", "Paris", 0.1),
                                           ("What color is the sky on a clear day?", "blue", 0.05)])]
TINY = dict(samples=2, greedy_tokens=3, sample_tokens=2, batch_prompts=1, decompose_layers=2, bootstrap_resamples=10)


def runner(lm, backend, root, **changes):
    params = PressureStudyParams(demo=True, **{**TINY, **changes})
    return StudyRunner(lm, backend, LocalBlobStore(root), "run", params)


def test_trace_blob_matches_a_direct_forward_pass_and_resume_matches_an_uninterrupted_run(study_lm, study_host,
                                                                                          tmp_path):
    # A run stopped after its first batch stands for a killed one: a batch's result is one blob written
    # atomically (beside, then renamed), so a kill leaves a batch either stored whole or not at all.
    backend = study_host.wait()
    whole = runner(study_lm, backend, tmp_path / "whole").run_batches(RECORDS, lambda *a: None, lambda: None)

    stopped = runner(study_lm, backend, tmp_path / "resumed", stop_after_batches=1)
    with pytest.raises(StopRequested):
        stopped.run_batches(RECORDS, lambda *a: None, lambda: None)
    first_batch = (tmp_path / "resumed" / "run" / "batches" / "00000.json")
    written = first_batch.stat().st_mtime_ns
    resumed = runner(study_lm, backend, tmp_path / "resumed")
    assert resumed.run_batches(RECORDS, lambda *a: None, lambda: None) == whole
    assert first_batch.stat().st_mtime_ns == written  # the finished batch was read, not recomputed

    # The negative prompt's blob against one unbatched forward pass with transformers' own outputs.
    record, result = RECORDS[0], whole[0]["conditions"]["negative"]
    data = resumed.store.get(resumed.trace_key("p0", "negative"))
    assert len(data) < 150_000  # what the metrics read at step T (about 110 KB), not the batch's storage
    blob = torch.load(io.BytesIO(data))
    prompt = study_lm.tokenizer(build_prompt("negative", record.question_text, record.target_word))["input_ids"]
    prefix = prompt + result["greedy_ids"][:result["T"]]
    assert blob["input_ids"].tolist() == prefix and blob["prompt_tokens"] == len(prompt) and blob["T"] == result["T"]
    with torch.inference_mode(), eager_attention(study_lm.model):
        out = study_lm.model(input_ids=torch.tensor([prefix]), output_hidden_states=True, output_attentions=True)
    layers = anatomy(study_lm.model).num_layers
    for layer in range(layers):  # Hugging Face's last hidden state is after the final norm; the blob's is before
        assert torch.allclose(blob["hidden_states"][layer], out.hidden_states[layer][0, -1], atol=1e-4)
    norm = anatomy(study_lm.model).norm
    assert torch.allclose(norm(blob["hidden_states"][layers]), out.hidden_states[layers][0, -1], atol=1e-4)
    for layer in range(layers):
        assert torch.allclose(blob["attentions"][layer], out.attentions[layer][0, :, -1, :len(prompt)], atol=1e-5)
    assert json.loads(json.dumps(result["lens"]))[-1] == pytest.approx(float(blob["lens"][-1]))


def plan_for(lm, source_condition: str):
    record = RECORDS[0]
    encode = lambda c: lm.tokenizer(build_prompt(c, record.question_text, record.target_word))["input_ids"]  # noqa
    source, target = encode(source_condition), encode("negative")
    return study.PatchPlan(source, target, [], [], [])


def test_patching_identical_source_and_target_changes_nothing(study_lm):
    paris = study_lm.tokenizer(" Paris", add_special_tokens=False)["input_ids"]
    plan = plan_for(study_lm, "negative")
    # Source and target are the same prompt, so any aligned tokens serve as "the question".
    question = list(range(len(plan.target) - 12, len(plan.target) - 3))
    plan = study.PatchPlan(plan.source, plan.target, question, question, [])
    for kind in ("residual", "attn_out", "kv_question", "instruction"):  # instruction: no tokens hidden
        effect = study.patch_effects(study_lm, plan, kind, paris, {paris[0]: 1.0}, 3)
        # Equal up to float rounding: the source runs whole, the patched rows after a shared prefix.
        assert effect["p_first"] == pytest.approx([effect["p_first_orig"]] * len(effect["p_first"]), abs=1e-5)
        assert effect["completions"] == [effect["completion_orig"]] * len(effect["completions"])


def test_patching_every_layer_residual_reproduces_the_source_distribution(study_lm):
    plan = plan_for(study_lm, "baseline")
    layers = anatomy(study_lm.model).num_layers
    source, probs, _ = study.patched_runs(study_lm, plan, "residual", [set(), set(range(layers))], 1)
    assert torch.allclose(probs[1], source, atol=1e-6)
    assert not torch.allclose(probs[0], source, atol=1e-3)  # the unpatched negative prompt differs
    paris = study_lm.tokenizer(" Paris", add_special_tokens=False)["input_ids"]
    last = study.patch_effects(study_lm, plan, "residual", paris, {paris[0]: 1.0}, 1)
    assert last["p_first"][-1] == pytest.approx(last["p_first_source"], abs=1e-6)
    # Hiding the prohibition line from the last position at every layer moves the prediction.
    prohibition = list(range(9, 20))
    knocked = study.PatchPlan(plan.source, plan.target, [], [], prohibition)
    _, hidden, _ = study.patched_runs(study_lm, knocked, "instruction", [set(), set(range(layers))], 1)
    assert torch.allclose(hidden[0], probs[0], atol=1e-5) and not torch.allclose(hidden[1], probs[0], atol=1e-3)
    # The unpatched row equals the negative prompt run alone.
    with torch.inference_mode():
        alone = study_lm.model(input_ids=torch.tensor([plan.target])).logits[0, -1].float().softmax(-1)
    assert torch.allclose(probs[0], alone, atol=1e-5)
