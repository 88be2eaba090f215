"""The semantic-pressure study's numbers on two devices, compared: CPU and CUDA must give the same greedy
completions, decision steps and flips, and the same logit lens, attention/MLP decomposition, attention metrics
and patching P within float32 rounding.

    python bench/compare_study_devices.py model DIR        # a small seeded Llama with SmolLM2's tokenizer
    python bench/compare_study_devices.py run cpu DIR cpu.json
    python bench/compare_study_devices.py run cuda DIR cuda.json cpu.json   # on the GPU machine: the differences

The model is small (5M parameters, 23 MB) so that it travels to a GPU machine with the code; its weights are
random but seeded, the same on both sides. Sampled fields are left out: CPU and CUDA draw different random
numbers for the same seed. Not a speed benchmark: it prints the largest differences.
"""
import json
import sys
import tempfile

import torch


def make_model(out: str) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from flawforge.inference.loading import load_model
    from flawforge.settings import Settings

    tok = load_model(Settings(inference_device="cpu", inference_dtype="float32")).tokenizer
    config = LlamaConfig(vocab_size=len(tok), hidden_size=96, intermediate_size=192, num_hidden_layers=4,
                         num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=True,
                         initializer_range=0.08, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         max_position_embeddings=2048)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    print("saved", out, sum(p.numel() for p in model.parameters()), "parameters")


PAIRS = [("What is the capital of France?", "Paris"), ("What do bees make?", "honey"),
         ("Complete the idiom: kick the ____", "bucket"), ("What language do people speak in China?", "Chinese")]


def plain(value):
    """A result object as JSON-able data."""
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if hasattr(value, "__dataclass_fields__"):
        return {k: plain(getattr(value, k)) for k in value.__dataclass_fields__}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def study_numbers(device: str, model_dir: str) -> dict:
    """The deterministic numbers of four prompts' passes and two prompts' patching, by prompt and condition."""
    from flawforge.blobstore.local import LocalBlobStore
    from flawforge.inference.loading import load_model
    from flawforge.inference.transformers_backend import TransformersBackend
    from flawforge.pipelines.pressure_study import PressureStudyParams
    from flawforge.pressure.study_runner import StudyRunner
    from flawforge.proto.pressure import PromptRecord
    from flawforge.settings import Settings

    settings = Settings(inference_device=device, inference_dtype="float32", inference_model_path=model_dir)
    lm = load_model(settings)
    records = [PromptRecord(prompt_id=f"p{i}", category="facts", question_text=q, target_word=x, v_score=0, p0=0.0,
                            p1=0.0, p0_bin="0.0-0.2", s_score=0) for i, (q, x) in enumerate(PAIRS)]
    params = PressureStudyParams(demo=True, samples=2, batch_prompts=len(records),
                                 decompose_first=-lm.model.config.num_hidden_layers).passes()
    with tempfile.TemporaryDirectory() as folder:
        runner = StudyRunner(lm, TransformersBackend(lm, settings.inference_batch_tokens), LocalBlobStore(folder),
                             "compare", params)
        results = runner.run_batch(records)
        patches = [runner.patch_prompt(r) for r in records[:2]]
    numbers = {}
    for result in results:
        for condition, c in result.conditions.items():
            numbers[f"{result.prompt_id}/{condition}"] = {
                "greedy_ids": c.greedy_ids, "T": c.T, "lens": c.lens, "attention": plain(c.attention),
                "decomposition": c.decomposition.model_dump() if c.decomposition else None}
    for patch in patches:
        for kind, effect in patch.kinds.items():
            numbers[f"{patch.prompt_id}/patch/{kind}"] = effect.model_dump()
    return {"device": str(lm.device), "torch": torch.__version__, "numbers": numbers}


def differences(ours: dict, theirs: dict) -> tuple[float, float, list]:
    """The largest absolute and relative (of values above 1e-9) float difference, and every integer, boolean or
    text that differs."""
    worst, worst_rel, exact = 0.0, 0.0, []

    def walk(a, b, where):
        nonlocal worst, worst_rel
        if isinstance(a, dict):
            for k in a:
                walk(a[k], b[k], f"{where}.{k}")
        elif isinstance(a, list):
            if len(a) != len(b):
                exact.append((where, "length", len(a), len(b)))
            else:
                for i, (x, y) in enumerate(zip(a, b)):
                    walk(x, y, f"{where}[{i}]")
        elif isinstance(a, (bool, int, str)) or a is None:
            if a != b:
                exact.append((where, a, b))
        else:
            worst = max(worst, abs(a - b))
            if max(abs(a), abs(b)) > 1e-9:
                worst_rel = max(worst_rel, abs(a - b) / max(abs(a), abs(b)))

    for key in ours:
        walk(ours[key], theirs[key], key)
    return worst, worst_rel, exact


def main() -> None:
    if sys.argv[1:2] == ["model"]:
        make_model(sys.argv[2])
        return
    device, model_dir, out = sys.argv[2:5]
    found = study_numbers(device, model_dir)
    with open(out, "w") as file:
        json.dump(found, file)
    print("wrote", out, len(found["numbers"]), "entries on", found["device"])
    if len(sys.argv) > 5:
        with open(sys.argv[5]) as file:
            other = json.load(file)
        worst, worst_rel, exact = differences(found["numbers"], other["numbers"])
        print(f"against {other['device']}: largest float difference {worst:.3g}, largest relative {worst_rel:.3g}; "
              f"{len(exact)} integers, booleans or texts differ {exact[:10]}")


if __name__ == "__main__":
    main()
