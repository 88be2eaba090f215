"""Concurrent greedy chat through the inference-server: total tokens/s and latency at concurrency 1, 4 and 8.

Flawforge: the inference-server over HTTP (uvicorn on a local port, in this process) on the local model,
its transformers backend batching concurrent requests step by step. Each level sends the same requests
(greedy chat, --max-tokens tokens each), at most that many in flight at once.
Baseline, measured in the same run: concurrency 1, one request at a time.
The levels run in two passes, 1, 4, 8 then 8, 4, 1, so that a machine whose load drifts (a shared one)
weighs on every level alike. Reported per level, over both passes: total completion tokens per second
(all its tokens over its wall time), p50 and p99 latency of a request, and how many replies have the text
they got at concurrency 1 (batching must not change greedy text; in float32 it is required, in bfloat16
on a GPU it is reported).
Target: at concurrency 8, at least 3x the concurrency-1 rate on the CPU.

Runs on a CUDA GPU when one is present (the device and dtype are the server's defaults: cuda and
bfloat16 where torch sees a GPU); it prints which. `--model` serves a Hugging Face folder instead of the
bundled SmolLM2-135M-Instruct.
"""
from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import torch

REPO = Path(__file__).resolve().parents[1]
TARGET_RATIO = 3.0
TOKEN = "bench-serving-token"
LEVELS = (1, 4, 8)
# Questions a small model answers at length, so that replies run to the token budget.
PROMPTS = ["Explain how a bicycle works, part by part.", "Describe the water cycle in detail.",
           "Write a short story about a lighthouse keeper.", "Explain why the sky is blue.",
           "List the planets of the solar system and describe each one.", "How does a refrigerator keep food cold?",
           "Describe a day in the life of a medieval baker.", "Explain how to bake bread, step by step."]


def serve(settings) -> tuple[str, object]:
    import uvicorn

    from flawforge.assembly import platform_for, service_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = service_app("inference-server", platform_for(settings))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}/v1", server


def ask(client: httpx.Client, model: str, prompt: str, max_tokens: int) -> tuple[str, int, float]:
    """One greedy chat completion: its text, completion tokens and latency."""
    start = time.perf_counter()
    reply = client.post("/chat/completions", json={
        "model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0,
        "max_tokens": max_tokens}).raise_for_status().json()
    return reply["choices"][0]["message"]["content"], reply["usage"]["completion_tokens"], time.perf_counter() - start


def level(client: httpx.Client, model: str, prompts: list[str], concurrency: int,
          max_tokens: int) -> tuple[list[tuple[str, int, float]], float]:
    """Each reply (text, tokens, latency) of `prompts` sent `concurrency` at a time, and the wall time."""
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        replies = list(pool.map(lambda prompt: ask(client, model, prompt, max_tokens), prompts))
    return replies, time.perf_counter() - start


def summary(concurrency: int, runs: list[tuple[list[tuple[str, int, float]], float]]) -> dict:
    """A level over its passes: its texts (by pass), tokens, wall time, rate and latency quantiles."""
    latencies = sorted(latency for replies, _ in runs for _, _, latency in replies)
    tokens = sum(count for replies, _ in runs for _, count, _ in replies)
    wall = sum(seconds for _, seconds in runs)
    return {"concurrency": concurrency, "texts": [[text for text, _, _ in replies] for replies, _ in runs],
            "tokens": tokens, "wall": wall, "rate": tokens / wall, "p50": statistics.median(latencies),
            "p99": percentile(latencies, 0.99)}


def percentile(ordered: list[float], q: float) -> float:
    """The q-quantile of sorted values, interpolated between neighbours."""
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--requests", type=int, default=len(PROMPTS), help="requests per level (prompts cycle)")
    parser.add_argument("--model", default="", help="a Hugging Face model folder (default: the bundled model)")
    args = parser.parse_args()

    from flawforge.inference.host import host_for
    from flawforge.settings import Settings

    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(REPO / "var" / "bench-serving"),
                        api_tokens=f"bench:{TOKEN}", inference_backend="transformers", inference_model_path=args.model,
                        inference_cache_dir=str(REPO / "var" / "models"))
    backend = host_for(settings).wait()
    lm = backend.lm
    base_url, server = serve(settings)
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(args.requests)]
    device = (torch.cuda.get_device_name(lm.device) if lm.device.type == "cuda"
              else f"CPU, {torch.get_num_threads()} threads")
    print(f"model {lm.name} ({lm.revision[:19]}) on {lm.device} ({device}), {lm.model.dtype}; {len(prompts)} greedy "
          f"chat requests of up to {args.max_tokens} tokens per level and pass, two passes (1, 4, 8, 8, 4, 1)")
    with httpx.Client(base_url=base_url, timeout=None, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        level(client, lm.name, prompts[:1], 1, 4)  # warm-up
        runs = {concurrency: [] for concurrency in LEVELS}
        for concurrency in LEVELS + LEVELS[::-1]:
            runs[concurrency].append(level(client, lm.name, prompts, concurrency, args.max_tokens))
    server.should_exit = True
    results = [summary(concurrency, runs[concurrency]) for concurrency in LEVELS]
    alone = results[0]
    expected = alone["texts"][0]
    print(f"{'concurrency':>11} {'tokens':>7} {'wall s':>7} {'tokens/s':>9} {'x c=1':>6} {'p50 s':>7} {'p99 s':>7} "
          f"{'same text':>9}")
    for result in results:
        texts = [text for texts in result["texts"] for text in texts]
        same = sum(a == b for a, b in zip(texts, expected * len(result["texts"])))
        print(f"{result['concurrency']:>11} {result['tokens']:>7} {result['wall']:>7.1f} {result['rate']:>9.1f} "
              f"{result['rate'] / alone['rate']:>6.2f} {result['p50']:>7.2f} {result['p99']:>7.2f} "
              f"{same:>6}/{len(texts)}")
    ratio = results[-1]["rate"] / alone["rate"]
    print(f"ratio at concurrency {LEVELS[-1]}: {ratio:.2f} (target >= {TARGET_RATIO} on the CPU)")
    if lm.model.dtype == torch.float32 and any(texts != expected for r in results for texts in r["texts"]):
        sys.exit("batched greedy text differs from the text alone in float32")
    if lm.device.type == "cpu" and ratio < TARGET_RATIO:
        sys.exit(f"below target: {ratio:.2f} < {TARGET_RATIO}")


if __name__ == "__main__":
    main()
