"""Greedy generation through the inference-server against transformers' own `model.generate`.

Flawforge: the inference-server over HTTP (uvicorn on a local port, in this process), chat
completions with temperature 0: request validation, the chat template, the sampling loop with its
logit adjustments and text release, the JSON response.
Baseline, measured in the same run on the same loaded model: `model.generate(do_sample=False)` on
the same prompt tokens, called directly (no HTTP, no server).
Both decode greedily, so they produce the same tokens; the bench checks that and compares tokens
per second. Then the same requests with `response_format` json_schema (grammar-constrained
decoding) against the server's unconstrained run: the overhead of constraining, per token.
Workload: GSM8K test questions as chat prompts, up to --max-tokens tokens each.
Target: the server within 15% of model.generate (ratio >= 0.85).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

import httpx
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("FLAWFORGE_SHARED_DATA", REPO.parent / "shared" / "data"))
TARGET_RATIO = 0.85
TOKEN = "bench-serving-token"
# Bounded so that a reply closes within twice --max-tokens (a digit is a token): a small model otherwise writes
# digits or reasoning until the limit.
ANSWER_SCHEMA = {"type": "object", "properties": {
    "reasoning": {"type": "string", "maxLength": 120}, "answer": {"type": "string", "pattern": "^-?[0-9]{1,9}$"}},
    "required": ["reasoning", "answer"], "additionalProperties": False}


def questions(count: int) -> list[str]:
    rows = (SHARED_DATA / "gsm8k" / "test.jsonl").read_text().splitlines()[:count]
    return [json.loads(row)["question"] for row in rows]


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


def through_server(client: httpx.Client, model: str, prompts: list[str], max_tokens: int,
                   response_format: dict | None = None) -> tuple[list[str], int, float, int]:
    """Texts, completion tokens, seconds, and how many replies were cut at max_tokens."""
    texts, tokens, cut = [], 0, 0
    start = time.perf_counter()
    for prompt in prompts:
        body = {"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0,
                "max_tokens": max_tokens, **({"response_format": response_format} if response_format else {})}
        reply = client.post("/chat/completions", json=body).raise_for_status().json()
        texts.append(reply["choices"][0]["message"]["content"])
        cut += reply["choices"][0]["finish_reason"] == "length"
        tokens += reply["usage"]["completion_tokens"]
    return texts, tokens, time.perf_counter() - start, cut


def direct(lm, prompts: list[str], max_tokens: int) -> tuple[list[str], int, float]:
    texts, tokens = [], 0
    start = time.perf_counter()
    with lm.lock, torch.inference_mode():
        for prompt in prompts:
            text = lm.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                    add_generation_prompt=True)
            ids = torch.tensor([lm.tokenizer(text, add_special_tokens=False)["input_ids"]], device=lm.device)
            out = lm.model.generate(ids, max_new_tokens=max_tokens, do_sample=False, temperature=None, top_p=None,
                                    top_k=None, pad_token_id=lm.tokenizer.eos_token_id)[0, ids.shape[1]:].tolist()
            generated = [t for t in out if t not in lm.eos_ids]
            tokens += len(generated)
            texts.append(lm.tokenizer.decode(generated, skip_special_tokens=True))
    return texts, tokens, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4, help="GSM8K test questions")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--constrained-only", action="store_true",
                        help="Only the json_schema requests: how many replies parse (no speed comparison).")
    args = parser.parse_args()

    from flawforge.services.inference_server.host import host_for
    from flawforge.settings import Settings

    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(REPO / "var" / "bench-serving"),
                        api_tokens=f"bench:{TOKEN}", inference_backend="transformers",
                        inference_cache_dir=str(REPO / "var" / "models"))
    backend = host_for(settings).wait()
    lm = backend.lm
    base_url, server = serve(settings)
    prompts = questions(args.prompts)
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA}}
    with httpx.Client(base_url=base_url, timeout=None, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        through_server(client, lm.name, prompts[:1], 8, fmt)  # warm-up, and the grammar compiler's first build
        if not args.constrained_only:
            direct(lm, prompts[:1], 8)
            served = through_server(client, lm.name, prompts, args.max_tokens)
            baseline = direct(lm, prompts, args.max_tokens)
        constrained = through_server(client, lm.name, prompts, 2 * args.max_tokens, fmt)
    server.should_exit = True
    parsed = (f"replies that parse: {sum(map(_parses, constrained[0]))} of {len(prompts)} "
              f"({constrained[3]} cut at {2 * args.max_tokens} tokens)")
    if args.constrained_only:
        print(f"model {lm.name} on {lm.device}; {len(prompts)} GSM8K questions, json_schema, up to "
              f"{2 * args.max_tokens} tokens: {constrained[1] / constrained[2]:.1f} tokens/s; {parsed}")
        return

    def rate(run) -> float:
        return run[1] / run[2]

    ratio = rate(served) / rate(baseline)
    overhead = rate(served) / rate(constrained) - 1
    print(f"model {lm.name} ({lm.revision[:19]}) on {lm.device}, {torch.get_num_threads()} CPU threads; "
          f"{len(prompts)} GSM8K questions, greedy, up to {args.max_tokens} tokens")
    print(f"server (HTTP):           {rate(served):6.1f} tokens/s ({served[1]} tokens, {served[2]:.1f} s)")
    print(f"model.generate (direct): {rate(baseline):6.1f} tokens/s ({baseline[1]} tokens, {baseline[2]:.1f} s)")
    print(f"server json_schema:      {rate(constrained):6.1f} tokens/s ({constrained[1]} tokens, "
          f"{constrained[2]:.1f} s); {parsed}")
    print(f"ratio server/direct: {ratio:.2f} (target >= {TARGET_RATIO}); same greedy text: "
          f"{served[0] == baseline[0]}; constrained decoding costs {overhead:+.1%} per token")
    if served[0] != baseline[0]:
        sys.exit("the server's greedy text differs from model.generate's")
    if ratio < TARGET_RATIO:
        sys.exit(f"below target: {ratio:.2f} < {TARGET_RATIO}")


def _parses(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except json.JSONDecodeError:
        return False


if __name__ == "__main__":
    main()
