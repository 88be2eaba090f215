"""Teacher-forced scoring throughput: continuations scored per second.

Flawforge: the inference-server's scorer (`flawforge.inference.research.score_continuations`):
prompts left-padded into one forward pass, their key/value cache shared by all their
continuations, which then run together.
Baseline, measured in the same run on the same model: the naive loop, one forward pass over
prompt + continuation per continuation, one prompt at a time (logits kept only where the
continuation is predicted, so the baseline does no needless unembedding).
Workload: GSM8K test questions in a 3-shot prompt (three solved training questions before each),
each followed by 8 candidate final answers (the true one and near misses), as when a model's
preference among answers is measured.
Target: at least 5x the baseline's rate on CPU; on a GPU the ratio is reported.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("FLAWFORGE_SHARED_DATA", REPO.parent / "shared" / "data"))
TARGET_RATIO = 5.0
SHOTS = 3
OFFSETS = (0, 1, -1, 2, 10, -10, 100)  # the true answer and its near misses; one more is the answer doubled


def final_answer(row: dict) -> int:
    return int(row["answer"].rsplit("####", 1)[1].strip().replace(",", ""))


def workload(tokenizer, prompts: int) -> list[tuple[list[int], list[list[int]]]]:
    def rows(split: str, count: int) -> list[dict]:
        return [json.loads(line) for line in (SHARED_DATA / "gsm8k" / f"{split}.jsonl").read_text().splitlines()[:count]]

    shots = "".join(f"Question: {row['question']}\nThe final answer is {final_answer(row)}.\n\n"
                    for row in rows("train", SHOTS))
    items = []
    for row in rows("test", prompts):
        answer = final_answer(row)
        prompt = tokenizer(f"{shots}Question: {row['question']}\nThe final answer is")["input_ids"]
        candidates = [answer + offset for offset in OFFSETS] + [answer * 2]
        items.append((prompt, [tokenizer(f" {c}", add_special_tokens=False)["input_ids"] for c in candidates]))
    return items


def naive_scores(lm, items) -> list[list[list[float]]]:
    results = []
    with torch.inference_mode():
        for prompt, conts in items:
            row = []
            for cont in conts:
                ids = torch.tensor([prompt + cont[:-1]], device=lm.device)
                logits = lm.model(input_ids=ids, logits_to_keep=len(cont)).logits[0]
                logprobs = torch.log_softmax(logits.float(), -1)
                row.append([logprobs[j, token].item() for j, token in enumerate(cont)])
            results.append(row)
    return results


def timed(run):
    start = time.perf_counter()
    result = run()
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--prompts", type=int, default=6, help="GSM8K questions, 8 continuations each")
    args = parser.parse_args()

    from flawforge.inference.loading import load_model
    from flawforge.inference.research import score_continuations
    from flawforge.settings import Settings

    settings = Settings(inference_device=args.device, inference_cache_dir=str(REPO / "var" / "models"))
    lm = load_model(settings)
    items = workload(lm.tokenizer, args.prompts)
    count = sum(len(conts) for _, conts in items)
    score_continuations(lm, items[:2], settings.inference_batch_tokens)  # warm-up
    naive_scores(lm, items[:1])
    batched, batched_s = timed(lambda: score_continuations(lm, items, settings.inference_batch_tokens))
    naive, naive_s = timed(lambda: naive_scores(lm, items))
    gap = max(abs(a - b) for x, y in zip(batched, naive) for u, v in zip(x, y) for a, b in zip(u, v))
    batched_rate, naive_rate = count / batched_s, count / naive_s
    ratio = batched_rate / naive_rate
    device = str(lm.device) + (f" ({torch.cuda.get_device_name()})" if lm.device.type == "cuda" else "")
    tokens = sum(len(p) for p, _ in items) / len(items)
    print(f"model {lm.name} on {device}, {lm.model.dtype}, {torch.get_num_threads()} CPU threads; "
          f"{len(items)} prompts of {tokens:.0f} tokens on average, {count} continuations")
    print(f"batched scorer: {batched_rate:8.1f} continuations/s ({batched_s:.2f} s)")
    print(f"naive loop:     {naive_rate:8.1f} continuations/s ({naive_s:.2f} s)")
    print(f"ratio: {ratio:.1f}x (target {TARGET_RATIO:.0f}x on CPU); largest log-probability difference {gap:.2e}")
    if lm.device.type == "cpu" and ratio < TARGET_RATIO:
        sys.exit(f"below target: {ratio:.1f}x < {TARGET_RATIO}x")


if __name__ == "__main__":
    main()
