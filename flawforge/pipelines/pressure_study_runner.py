"""Runs the study's model passes batch by batch, storing each batch's result before the next, and
turns the results into the run's files.

Per prompt and condition the trace blob `{prompt_id}_{condition}.pt` keeps, at the decision step T
(the last position of prompt + completion[:T]): `hidden_states` [L+1, d] float32 (embedding output and
every block's output, before the final norm), `attentions` [L, heads, prompt_tokens] float32 (query T
to the prompt's keys), `lens` [L+1] and `decomposition` [k, 3] (the readouts the metrics use), and
`input_ids`, `prompt_tokens`, `T`. For SmolLM2-135M (30 layers, 9 heads, d=576, prompts of about
35 tokens) that is about 115 KB per prompt and condition; the full attention maps and every
position's states would be some 40 times more and nothing reads them.
"""
from __future__ import annotations

import io
import json
import math
from typing import Callable

import numpy as np
import torch

from flawforge.blobstore import BlobStore
from flawforge.inference import study
from flawforge.inference.research import score_continuations
from flawforge.inference import word_forms
from flawforge.pressure import detector, metrics
from flawforge.pressure.prompts import CONDITIONS, build_prompt, spans
from flawforge.proto.pressure import PromptRecord


class StudyRunner:
    def __init__(self, lm, backend, store: BlobStore, key: str, params):
        self.lm, self.backend, self.store, self.key, self.params = lm, backend, store, key, params
        self.tok = lm.tokenizer

    # --- helpers -------------------------------------------------------------------------------

    def encode_prompt(self, text: str) -> list[int]:
        return self.tok(text)["input_ids"]

    def decode(self, ids) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def sequences(self, word: str) -> list[tuple[int, ...]]:
        return word_forms.sequences(word, lambda text: self.tok(text, add_special_tokens=False)["input_ids"], self.decode)

    def span_tokens(self, condition: str, record: PromptRecord) -> dict[str, list[int]]:
        """Token indices of each attention span, by the tokenizer's character offsets."""
        text = build_prompt(condition, record.question_text, record.target_word)
        offsets = self.tok(text, return_offsets_mapping=True)["offset_mapping"]
        return {name: metrics.tokens_in_span(offsets, a, b)
                for name, (a, b) in spans(condition, record.question_text, record.target_word).items()}

    def _put_json(self, name: str, value) -> None:
        self.store.put(f"{self.key}/{name}", json.dumps(value).encode())

    def _get_json(self, name: str):
        key = f"{self.key}/{name}"
        return json.loads(self.store.get(key)) if self.store.exists(key) else None

    def trace_key(self, prompt_id: str, condition: str) -> str:
        return f"{self.key}/traces/{prompt_id}_{condition}.pt"

    # --- batches -------------------------------------------------------------------------------

    def run_batches(self, records: list[PromptRecord], progress: Callable, check_cancelled: Callable) -> list[dict]:
        size = self.params.batch_prompts
        results: list[dict] = []
        new = 0
        for start in range(0, len(records), size):
            name = f"batches/{start // size:05d}.json"
            found = self._get_json(name)
            if found is None:
                if self.params.stop_after_batches is not None and new >= self.params.stop_after_batches:
                    raise StopRequested(f"stopped after {new} new batches, as asked")
                check_cancelled()
                found = self.run_batch(records[start:start + size])
                self._put_json(name, found)
                new += 1
            results += found
            progress(len(results), len(records))
        return results

    def run_batch(self, batch: list[PromptRecord]) -> list[dict]:
        p = self.params
        rows = [(record, condition) for record in batch for condition in CONDITIONS]
        prompts = [self.encode_prompt(build_prompt(c, r.question_text, r.target_word)) for r, c in rows]
        prefilled = study.prefill(self.lm, prompts)  # the passes below continue the prompts' one run
        greedy, samples = self.complete(prompts, prefilled)
        steps = [detector.decision_step(ids, r.target_word, self.decode) for ids, (r, _) in zip(greedy, rows)]
        seqs = {r.prompt_id: self.sequences(r.target_word) for r in batch}
        lens_ids = [word_forms.single_token_ids(seqs[r.prompt_id]) for r, _ in rows]
        traces = study.trace_at(self.lm, prefilled, greedy, steps, lens_ids, p.decompose_layers)
        out: dict[str, dict] = {r.prompt_id: {"prompt_id": r.prompt_id, "conditions": {}} for r in batch}
        for row, (record, condition) in enumerate(rows):
            trace = traces[row]
            blob = io.BytesIO()
            torch.save({**trace, "T": steps[row], "model": self.lm.name}, blob)
            self.store.put(self.trace_key(record.prompt_id, condition), blob.getvalue())
            attention = metrics.attention_metrics(trace["attentions"].numpy(), self.span_tokens(condition, record))
            texts = [self.decode(ids) for ids in samples[row]]
            behaviour = metrics.behaviour(texts, record.target_word)
            out[record.prompt_id]["conditions"][condition] = {
                "greedy_ids": greedy[row], "greedy_text": self.decode(greedy[row]),
                "greedy_violation": bool(detector.detect(greedy[row], record.target_word, self.decode).found),
                "T": steps[row], "lens": trace["lens"].tolist(),
                "decomposition": trace["decomposition"].tolist(), "decomposition_layers": trace["decomposition_layers"],
                "attention": {name: {"global": v["global"], "per_layer": v["per_layer"]} for name, v in attention.items()},
                "samples": [{"ids": ids, "text": text} for ids, text in zip(samples[row], texts)],
                "violation_rate": behaviour.violation_rate, "format_adherence": behaviour.format_adherence,
                "clean_success": behaviour.clean_success,
            }
        return [out[r.prompt_id] for r in batch]

    def complete(self, prompts: list[list[int]], prefilled: study.Prefill) -> tuple[list, list]:
        """The greedy completion and `samples` samples of each prompt: both in one transformers batch, or the
        samples on vLLM where the server samples with it."""
        p = self.params
        if self.backend.name == "vllm":
            from flawforge.inference.backend import SamplingParams

            params = SamplingParams(n=p.samples, temperature=p.temperature, top_p=p.top_p, max_tokens=p.sample_tokens,
                                    seed=p.seed)
            greedy, _ = study.generate(self.lm, prefilled, p.greedy_tokens)
            return greedy, [[s.token_ids for s in self.backend.generate(prompt, params)] for prompt in prompts]
        return study.generate(self.lm, prefilled, p.greedy_tokens,
                              study.Sampling(p.samples, p.temperature, p.top_p, p.seed), p.sample_tokens)

    # --- patching ------------------------------------------------------------------------------

    def run_patching(self, records: list[PromptRecord], results: list[dict], progress: Callable,
                     check_cancelled: Callable) -> dict:
        chosen, rule = patch_subset(records, results, self.params.patch_subset)
        by_id = {r.prompt_id: r for r in records}
        effects = {}
        for done, prompt_id in enumerate(chosen):
            name = f"patches/{prompt_id}.json"
            found = self._get_json(name)
            if found is None:
                check_cancelled()
                found = self.patch_prompt(by_id[prompt_id])
                self._put_json(name, found)
            effects[prompt_id] = found
            progress(done + 1, len(chosen))
        return {"rule": rule, "prompts": chosen, "effects": effects}

    def patch_prompt(self, record: PromptRecord) -> dict:
        base = self.encode_prompt(build_prompt("baseline", record.question_text, record.target_word))
        neg = self.encode_prompt(build_prompt("negative", record.question_text, record.target_word))
        base_spans, neg_spans = self.span_tokens("baseline", record), self.span_tokens("negative", record)
        if len(base_spans["q"]) != len(neg_spans["q"]):
            raise detector.MappingError(f"{record.prompt_id}: the question tokenizes differently in the two prompts")
        plan = study.PatchPlan(base, neg, base_spans["q"], neg_spans["q"], neg_spans["instr"])
        seqs = self.sequences(record.target_word)
        [scores] = score_continuations(self.lm, [(neg, [list(s) for s in seqs])], 4096)
        rest: dict[int, float] = {}
        for seq, logprobs in zip(seqs, scores):
            rest[seq[0]] = rest.get(seq[0], 0.0) + math.exp(sum(logprobs[1:]))
        first = word_forms.single_token_ids(seqs)
        out = {}
        for kind in study.PATCH_KINDS:
            effect = study.patch_effects(self.lm, plan, kind, first, rest, self.params.greedy_tokens)
            violated = detector.detect(effect["completion_orig"], record.target_word, self.decode).found
            out[kind] = {
                "p_orig": effect["p_orig"], "p_first_orig": effect["p_first_orig"],
                "delta_p": [x - effect["p_orig"] for x in effect["p"]],
                "delta_p_first": [x - effect["p_first_orig"] for x in effect["p_first"]],
                "flip": [detector.detect(ids, record.target_word, self.decode).found != violated
                         for ids in effect["completions"]],
            }
        return out


class StopRequested(RuntimeError):
    """A run asked to stop after some batches (resumption tests)."""


def patch_subset(records: list[PromptRecord], results: list[dict], limit: int | None) -> tuple[list[str], dict]:
    """The balanced high-P0 subset: P0 >= max(0.7, min(0.95, q75 of P0)); every success and min(S, F)
    failures, highest P0 first. A model whose P0 never reaches the threshold (a small model) gets every
    prompt ranked by P0 instead, recorded in the rule. `limit` keeps the first prompts of the alternation."""
    p0 = np.array([r.p0 for r in records])
    threshold = max(0.7, min(0.95, float(np.quantile(p0, 0.75))))
    high = [i for i in range(len(records)) if p0[i] >= threshold]
    rule = {"threshold": threshold, "fallback": None}
    if not high:
        # A small model (SmolLM2: P0 far below 0.7) leaves the subset empty: the gate is off, every prompt
        # is a candidate, highest P0 first.
        high = list(range(len(records)))
        rule["fallback"] = f"no prompt reaches P0 >= {threshold:.2f}; gate off, prompts ranked by P0 instead"
    high.sort(key=lambda i: -p0[i])
    failures = [i for i in high if results[i]["conditions"]["negative"]["greedy_violation"]]
    successes = [i for i in high if not results[i]["conditions"]["negative"]["greedy_violation"]]
    chosen_f = failures[:min(len(successes), len(failures))]
    # Successes and failures alternate, so a limit keeps the balance.
    order = [i for pair in zip(successes, chosen_f) for i in pair] + successes[len(chosen_f):]
    if limit is not None:
        order = order[:limit]
    rule.update({"successes": sum(i in successes for i in order), "failures": sum(i in chosen_f for i in order)})
    return [records[i].prompt_id for i in order], rule


def outputs(records, results, patches, params, lm, key: str, elapsed: float) -> dict[str, bytes]:
    from flawforge.pressure import figures, tables

    completions = "".join(
        json.dumps({"prompt_id": res["prompt_id"], "condition": condition, "sample": i, "token_ids": s["ids"],
                    "text": s["text"], "violation": bool(detector.find_word(s["text"], rec.target_word))}) + "\n"
        for rec, res in zip(records, results) for condition in CONDITIONS
        for i, s in enumerate(res["conditions"][condition]["samples"])).encode()
    per_prompt = "".join(json.dumps(tables.prompt_row(rec, res)) + "\n" for rec, res in zip(records, results)).encode()
    table = tables.build_tables(records, results, patches, params, lm_name=lm.name,
                                num_layers=len(results[0]["conditions"]["baseline"]["lens"]) - 1,
                                trace_prefix=f"{key}/traces", elapsed=elapsed)
    files = {"completions.jsonl": completions, "prompt_metrics.jsonl": per_prompt,
             "prompts.jsonl": "".join(r.model_dump_json() + "\n" for r in records).encode(),
             "tables.json": json.dumps(table, indent=1).encode()}
    images = figures.all_figures(table)
    files.update(images)
    files["report.md"] = tables.report(table, sorted(images)).encode()
    return files
