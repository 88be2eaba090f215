"""Semantic-pressure study throughput: prompts per second through greedy + traces + 16 samples.

Flawforge: the study runner's batch (`flawforge.pressure.study_runner.StudyRunner.run_batch`): both
conditions of every prompt in one left-padded batch per pass (greedy 8 tokens with a KV cache, one traced
forward pass at the decision step keeping what the metrics read, the sampling pass with each prompt run
once and its cache repeated for its 16 samples), the trace blobs written to a blob folder.
Baseline, measured in the same run on the same model: the seed's loop, one prompt and condition at a
time: `model.generate` greedy for 8 tokens with `output_hidden_states` and `output_attentions` (the
seed's mechanistic pass; its states saved with torch.save), then `model.generate` sampling 16 sequences
of 10 tokens (T=1, top-p 0.9).
Workload: the demo's prompts (the dataset stage's offline generators: GeoNames facts, WordNet idioms and
relations), both conditions each.
Target: at least 5x the baseline's rate on CPU; on a GPU the ratio is reported.
The ratio is taken on this process's CPU time (torch on one thread) as well as on wall time: on a shared
machine the wall time of each side swings with the load of the moment, its CPU time does not.

On CUDA (`--device cuda`, or auto where a GPU is present) the bench runs standalone, from the model files
alone (`--model`: a Hugging Face folder or a .gguf; default: the configured model): it prints the study
runner's GPU rate, the seed loop's, the time to patch one prompt (every kind, every block) and the
estimate for the 2,500-prompt study with the paper's 769 patched prompts. GPU timings synchronise the
device before reading the clock.
"""
from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
TARGET_RATIO = 5.0
PAPER_PATCHED = 769  # the paper's balanced high-P0 subset


def seed_loop(lm, prompts: list[list[int]], samples: int) -> None:
    from flawforge.inference.hooks import eager_attention

    with torch.inference_mode(), eager_attention(lm.model):
        for ids in prompts:
            inputs = torch.tensor([ids], device=lm.device)
            greedy = lm.model.generate(inputs, max_new_tokens=8, do_sample=False, output_hidden_states=True,
                                       output_attentions=True, return_dict_in_generate=True,
                                       pad_token_id=lm.tokenizer.eos_token_id)
            torch.save((greedy.hidden_states, greedy.attentions), io.BytesIO())
            torch.manual_seed(42)
            lm.model.generate(inputs, max_new_tokens=10, do_sample=True, temperature=1.0, top_p=0.9, top_k=0,
                              num_return_sequences=samples, pad_token_id=lm.tokenizer.eos_token_id)


@contextmanager
def timed(lm):
    """Wall and CPU seconds of the block, the device synchronised at both ends (a GPU runs asynchronously)."""
    found: dict[str, float] = {}
    sync = torch.cuda.synchronize if lm.device.type == "cuda" else (lambda: None)
    sync()
    start, cpu = time.perf_counter(), time.process_time()
    yield found
    sync()
    found.update(wall=time.perf_counter() - start, cpu=time.process_time() - cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--prompts", type=int, default=8, help="demo prompts, both conditions each")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--model", default="", help="Hugging Face folder or .gguf; default: the configured model")
    parser.add_argument("--dtype", default="auto", help="auto: bfloat16 on CUDA, float32 on CPU")
    args = parser.parse_args()

    from flawforge.blobstore.local import LocalBlobStore
    from flawforge.inference.transformers_backend import TransformersBackend
    from flawforge.inference.loading import load_model
    from flawforge.inference.patching import PATCH_KINDS
    from flawforge.pipelines.pressure_study import PressureStudyParams
    from flawforge.pressure.demo import demo_candidates
    from flawforge.pressure.prompts import CONDITIONS, build_prompt
    from flawforge.pressure.study_runner import StudyRunner
    from flawforge.proto.pressure import PromptRecord
    from flawforge.settings import Settings

    settings = Settings(inference_device=args.device, inference_dtype=args.dtype, inference_model_path=args.model,
                        inference_cache_dir=str(REPO / "var" / "models"))
    lm = load_model(settings)
    records = [PromptRecord(prompt_id=f"bench-{i}", category=c.category, question_text=c.question_text,
                            target_word=c.target_word, v_score=0, p0=0.0, p1=0.0, p0_bin="0.0-0.2", s_score=0)
               for i, c in enumerate(demo_candidates(args.prompts, 42))]
    params = PressureStudyParams(demo=True, samples=args.samples, batch_prompts=args.prompts).passes()
    prompts = [lm.tokenizer(build_prompt(c, r.question_text, r.target_word))["input_ids"]
               for r in records for c in CONDITIONS]
    with tempfile.TemporaryDirectory() as folder:
        runner = StudyRunner(lm, TransformersBackend(lm, settings.inference_batch_tokens), LocalBlobStore(folder),
                             "bench", params)
        runner.run_batch(records[:1])  # warm-up
        seed_loop(lm, prompts[:1], args.samples)
        with timed(lm) as study:
            runner.run_batch(records)
        if lm.device.type == "cuda":
            runner.patch_prompt(records[0])  # warm-up
            with timed(lm) as patching:
                runner.patch_prompt(records[1])
    with timed(lm) as seed:
        seed_loop(lm, prompts, args.samples)
    study_s, study_cpu, seed_s, seed_cpu = study["wall"], study["cpu"], seed["wall"], seed["cpu"]
    study_rate, seed_rate = len(records) / study_s, len(records) / seed_s
    ratio = seed_cpu / study_cpu if lm.device.type == "cpu" else study_rate / seed_rate
    device = str(lm.device) + (f" ({torch.cuda.get_device_name()})" if lm.device.type == "cuda" else "")
    print(f"model {lm.name} on {device}, {lm.model.dtype}, {torch.get_num_threads()} CPU threads; {len(records)} "
          f"prompts x 2 conditions, greedy 8 tokens + trace + {args.samples} samples of 10 tokens")
    print(f"study runner: {study_rate:7.3f} prompts/s ({study_s:.1f} s wall, {study_cpu:.1f} s CPU)")
    print(f"seed's loop:  {seed_rate:7.3f} prompts/s ({seed_s:.1f} s wall, {seed_cpu:.1f} s CPU)")
    print(f"ratio: {ratio:.1f}x on {'CPU time' if lm.device.type == 'cpu' else 'wall time'}, {study_rate / seed_rate:.1f}x "
          f"on wall time (target {TARGET_RATIO:.0f}x on CPU)")
    if lm.device.type == "cuda":
        per_patch = patching["wall"]
        print(f"GPU rate: {study_rate:.2f} prompts/s (greedy + trace + {args.samples} samples, both conditions); "
              f"patching one prompt, {len(PATCH_KINDS)} kinds x every block: {per_patch:.2f} s")
        print(f"estimate for 2,500 prompts on this GPU: {2500 / study_rate / 3600:.2f} h of greedy + traces + "
              f"sampling, {PAPER_PATCHED * per_patch / 3600:.2f} h patching {PAPER_PATCHED} prompts (the paper's "
              f"subset); {(2500 / study_rate + PAPER_PATCHED * per_patch) / 3600:.2f} h in all")
    if lm.device.type == "cpu" and ratio < TARGET_RATIO:
        sys.exit(f"below target: {ratio:.1f}x < {TARGET_RATIO}x")


if __name__ == "__main__":
    main()
