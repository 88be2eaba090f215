"""Runs the study's model passes of one batch, and the patching of one prompt, storing each result in the
run's state (the work items the inference-servers take, `work_on`); reads them back and turns them into the
run's files. Model code and blob-store I/O, unlike the pure modules beside it.

Per prompt and condition the trace blob `{prompt_id}_{condition}.pt` keeps, at the decision step T
(the last position of prompt + completion[:T]): `hidden_states` [L+1, d] float32 (embedding output and
every block's output, before the final norm), `attentions` [L, heads, prompt_tokens] float32 (query T
to the prompt's keys), `lens` [L+1] and `decomposition` [k, 3] (the readouts the metrics use; None
where X has no single-token form), and `input_ids`, `prompt_tokens`, `T`. For SmolLM2-135M (30
layers, 9 heads, d=576, prompts of about 35 tokens) that is about 115 KB per prompt and condition;
the full attention maps and every position's states would be some 40 times more and nothing reads them.

Each stored batch and patched prompt carries the seconds it took, so the report gives the run time of
the whole run, whichever invocations (or workers) computed its parts.
"""
from __future__ import annotations

import io
import json
import math
import time

import numpy as np
import torch

from flawforge.blobstore import BlobStore
from flawforge.errors import FlawforgeError
from flawforge.inference import prefill, word_forms
from flawforge.inference.patching import PATCH_KINDS, PatchPlan, patch_effects
from flawforge.inference.research import score_continuations, trace_at
from flawforge.pressure import detector, metrics
from flawforge.pressure.prompts import CONDITIONS, build_prompt, spans
from flawforge.proto.pressure import (
    ConditionResult, Decomposition, PatchEffect, PatchSubset, PromptPatches, PromptRecord, PromptResult, Sample,
)
from flawforge.proto.pressure_work import PassParams, StudyWork, StudyWorkResult


def decompose_blocks(first: int, last: int, num_layers: int) -> list[int]:
    """The blocks first..last (inclusive; negative counts from the end, -1 the last block) of a model of
    `num_layers` blocks."""
    for name, value in (("decompose_first", first), ("decompose_last", last)):
        if not -num_layers <= value < num_layers:
            raise FlawforgeError(f"{name}={value}: the model has blocks 0..{num_layers - 1} (or -{num_layers}..-1 "
                                 "from the end)")
    low, high = first % num_layers, last % num_layers
    if low > high:
        raise FlawforgeError(f"decompose_first={first} (block {low}) comes after decompose_last={last} "
                             f"(block {high})")
    return list(range(low, high + 1))


def span_tokens(tokenizer, condition: str, record: PromptRecord) -> dict[str, list[int]]:
    """Token indices of each attention span of the prompt of `condition`, by the tokenizer's character offsets."""
    text = build_prompt(condition, record.question_text, record.target_word)
    offsets = tokenizer(text, return_offsets_mapping=True)["offset_mapping"]
    return {name: metrics.tokens_in_span(offsets, a, b)
            for name, (a, b) in spans(condition, record.question_text, record.target_word).items()}


class StudyRunner:
    def __init__(self, lm, backend, store: BlobStore, key: str, params: PassParams):
        self.lm, self.backend, self.store, self.key, self.params = lm, backend, store, key, params
        self.tok = lm.tokenizer
        self.blocks = decompose_blocks(params.decompose_first, params.decompose_last,
                                       lm.model.config.num_hidden_layers)

    # --- helpers -------------------------------------------------------------------------------

    def encode_prompt(self, text: str) -> list[int]:
        return self.tok(text)["input_ids"]

    def decode(self, ids) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def sequences(self, word: str) -> list[tuple[int, ...]]:
        return word_forms.sequences(word, lambda text: self.tok(text, add_special_tokens=False)["input_ids"],
                                    self.decode)

    def span_tokens(self, condition: str, record: PromptRecord) -> dict[str, list[int]]:
        return span_tokens(self.tok, condition, record)

    def _put_json(self, name: str, value) -> None:
        self.store.put(f"{self.key}/{name}", json.dumps(value).encode())

    def _get_json(self, name: str):
        key = f"{self.key}/{name}"
        return json.loads(self.store.get(key)) if self.store.exists(key) else None

    def trace_key(self, prompt_id: str, condition: str) -> str:
        return f"{self.key}/traces/{prompt_id}_{condition}.pt"

    def start_invocation(self) -> dict:
        """Counts this invocation in the run's clock (clock.json: the first start and the invocations)."""
        clock = self._get_json("clock.json") or {"first_started": time.time(), "invocations": 0}
        clock["invocations"] += 1
        self._put_json("clock.json", clock)
        return clock

    # --- batches -------------------------------------------------------------------------------

    def batches(self, records: list[PromptRecord]) -> list[list[PromptRecord]]:
        """The run's batches: the records' order cut every `batch_prompts` (the unit of work and of resumption)."""
        size = self.params.batch_prompts
        return [records[start:start + size] for start in range(0, len(records), size)]

    @staticmethod
    def batch_name(index: int) -> str:
        return f"batches/{index:05d}.json"

    def missing_batches(self, records: list[PromptRecord]) -> list[int]:
        """The numbers of the batches whose results the run does not hold yet."""
        return [index for index in range(len(self.batches(records)))
                if not self.store.exists(f"{self.key}/{self.batch_name(index)}")]

    def compute_batch(self, index: int, batch: list[PromptRecord]) -> None:
        """Runs one batch and stores its results with the seconds they took; a batch already stored (an item
        delivered again) is left as it is."""
        if self.store.exists(f"{self.key}/{self.batch_name(index)}"):
            return
        began = time.monotonic()
        results = self.run_batch(batch)
        self._put_json(self.batch_name(index), {"seconds": time.monotonic() - began,
                                                "results": [r.model_dump(mode="json") for r in results]})

    def stored_batches(self, records: list[PromptRecord]) -> tuple[list[PromptResult], float]:
        """Every batch's results, in the records' order, and the seconds the batches took (when each ran)."""
        results: list[PromptResult] = []
        seconds = 0.0
        for index in range(len(self.batches(records))):
            found = self._get_json(self.batch_name(index))
            if found is None:
                raise FlawforgeError(f"the run {self.key} holds no result for batch {index}")
            results += [PromptResult.model_validate(r) for r in found["results"]]
            seconds += found["seconds"]
        return results, seconds

    def run_batch(self, batch: list[PromptRecord]) -> list[PromptResult]:
        rows = [(record, condition) for record in batch for condition in CONDITIONS]
        prompts = [self.encode_prompt(build_prompt(c, r.question_text, r.target_word)) for r, c in rows]
        prefilled = prefill.prefill(self.lm, prompts)  # the passes below continue the prompts' one run
        greedy, samples = self.complete(prompts, prefilled)
        steps = [detector.decision_step(ids, r.target_word, self.decode) for ids, (r, _) in zip(greedy, rows)]
        single = {r.prompt_id: word_forms.single_token_ids(self.sequences(r.target_word)) for r in batch}
        traces = trace_at(self.lm, prefilled, greedy, steps, [single[r.prompt_id] for r, _ in rows], self.blocks)
        conditions: dict[str, dict[str, ConditionResult]] = {r.prompt_id: {} for r in batch}
        for row, (record, condition) in enumerate(rows):
            trace = traces[row]
            blob = io.BytesIO()
            torch.save({**trace, "T": steps[row], "model": self.lm.name}, blob)
            self.store.put(self.trace_key(record.prompt_id, condition), blob.getvalue())
            per_head = metrics.attention_metrics(trace["attentions"].numpy(), self.span_tokens(condition, record))
            texts = [self.decode(ids) for ids in samples[row]]
            behaviour = metrics.behaviour(texts, record.target_word)
            decomposition = trace["decomposition"]
            conditions[record.prompt_id][condition] = ConditionResult(
                greedy_ids=greedy[row], greedy_text=self.decode(greedy[row]),
                greedy_violation=detector.detect(greedy[row], record.target_word, self.decode).found,
                T=steps[row], lens=trace["lens"].tolist() if trace["lens"] is not None else None,
                decomposition=Decomposition(blocks=self.blocks, p_in=decomposition[:, 0].tolist(),
                                            p_after_attn=decomposition[:, 1].tolist(),
                                            p_after_mlp=decomposition[:, 2].tolist())
                if decomposition is not None else None,
                attention=metrics.attention_summary(per_head),
                samples=[Sample(ids=ids, text=text) for ids, text in zip(samples[row], texts)],
                violation_rate=behaviour.violation_rate, format_adherence=behaviour.format_adherence,
                format_adherence_first_line=behaviour.format_adherence_first_line,
                clean_success=behaviour.clean_success, clean_success_first_line=behaviour.clean_success_first_line)
        return [PromptResult(prompt_id=r.prompt_id, conditions=conditions[r.prompt_id]) for r in batch]

    def complete(self, prompts: list[list[int]], prefilled: prefill.Prefill) -> tuple[list, list]:
        """The greedy completion and `samples` samples of each prompt: both in one transformers batch, or the
        samples on vLLM where the server samples with it."""
        p = self.params
        if self.backend.name == "vllm":
            from flawforge.inference.backend import SamplingParams

            params = SamplingParams(n=p.samples, temperature=p.temperature, top_p=p.top_p, max_tokens=p.sample_tokens,
                                    seed=p.seed)
            greedy, _ = prefill.generate(self.lm, prefilled, p.greedy_tokens)
            return greedy, [[s.token_ids for s in self.backend.generate(prompt, params)] for prompt in prompts]
        return prefill.generate(self.lm, prefilled, p.greedy_tokens,
                                prefill.Sampling(p.samples, p.temperature, p.top_p, p.seed), p.sample_tokens)

    # --- patching ------------------------------------------------------------------------------

    @staticmethod
    def patch_name(prompt_id: str) -> str:
        return f"patches/{prompt_id}.json"

    def missing_patches(self, subset: PatchSubset) -> list[str]:
        """The prompts of the patched subset whose effects the run does not hold yet."""
        return [prompt_id for prompt_id in subset.prompts
                if not self.store.exists(f"{self.key}/{self.patch_name(prompt_id)}")]

    def compute_patches(self, record: PromptRecord) -> None:
        """Patches one prompt and stores its effects with the seconds they took, unless they are stored."""
        if self.store.exists(f"{self.key}/{self.patch_name(record.prompt_id)}"):
            return
        began = time.monotonic()
        patched = self.patch_prompt(record)
        self._put_json(self.patch_name(record.prompt_id), {"seconds": time.monotonic() - began,
                                                           "patches": patched.model_dump(mode="json")})

    def stored_patches(self, subset: PatchSubset) -> tuple[list[PromptPatches], float]:
        """Each patched prompt's effects, in the subset's order, and the seconds they took."""
        effects, seconds = [], 0.0
        for prompt_id in subset.prompts:
            found = self._get_json(self.patch_name(prompt_id))
            if found is None:
                raise FlawforgeError(f"the run {self.key} holds no patching result for prompt {prompt_id}")
            effects.append(PromptPatches.model_validate(found["patches"]))
            seconds += found["seconds"]
        return effects, seconds

    def patch_prompt(self, record: PromptRecord) -> PromptPatches:
        base = self.encode_prompt(build_prompt("baseline", record.question_text, record.target_word))
        neg = self.encode_prompt(build_prompt("negative", record.question_text, record.target_word))
        base_spans, neg_spans = self.span_tokens("baseline", record), self.span_tokens("negative", record)
        plan = PatchPlan(source=base, target=neg, source_instruction=base_spans["instr"],
                         target_instruction=neg_spans["instr"], source_question=base_spans["q"],
                         target_question=neg_spans["q"])
        seqs = self.sequences(record.target_word)
        [scores] = score_continuations(self.lm, [(neg, [list(s) for s in seqs])], 4096)
        rest: dict[int, float] = {}
        for seq, logprobs in zip(seqs, scores):
            rest[seq[0]] = rest.get(seq[0], 0.0) + math.exp(sum(logprobs[1:]))
        single = word_forms.single_token_ids(seqs)
        kinds = {}
        for name, kind in PATCH_KINDS.items():
            found = patch_effects(self.lm, plan, kind, single, rest, self.params.greedy_tokens)
            violated = detector.detect(found.completion_orig, record.target_word, self.decode).found
            kinds[name] = PatchEffect(
                p_orig=found.p_orig, p_first_orig=found.p_first_orig,
                delta_p=[x - found.p_orig for x in found.p],
                delta_p_first=([x - found.p_first_orig for x in found.p_first] if found.p_first is not None
                               else None),
                flip=[detector.detect(ids, record.target_word, self.decode).found != violated
                      for ids in found.completions])
        return PromptPatches(prompt_id=record.prompt_id, kinds=kinds)

    # --- per-head attention, from the traces ---------------------------------------------------------

    def head_maps(self, records: list[PromptRecord], results: list[PromptResult]) -> dict:
        """Per outcome, the mean over prompts of the negative prompt's attention at the decision step, per layer
        and head: M(prohibition line) and PI (read back from the trace blobs)."""
        sums: dict[str, dict[str, np.ndarray]] = {}
        counts: dict[str, int] = {}
        for record, result in zip(records, results):
            blob = torch.load(io.BytesIO(self.store.get(self.trace_key(record.prompt_id, "negative"))),
                              weights_only=True)
            attention = blob["attentions"].numpy()
            found = self.span_tokens("negative", record)
            maps = {"prohibition_mass": metrics.span_mass(attention, found["instr"]),
                    "pi": metrics.attention_metrics(attention, found)["pi"]}
            outcome = result.outcome
            counts[outcome] = counts.get(outcome, 0) + 1
            for name, values in maps.items():
                sums.setdefault(name, {}).setdefault(outcome, np.zeros_like(values))
                sums[name][outcome] += values
        return {"n": counts, **{name: {outcome: (total / counts[outcome]).tolist() for outcome, total in by.items()}
                                for name, by in sums.items()}}


def work_on(message: StudyWork, lm, backend, store: BlobStore) -> StudyWorkResult:
    """An inference-server's part of a study: the item's passes or patching, stored in the run's state. Returns
    the item's result, which the server stores at the item key."""
    if message.model != lm.name:
        raise FlawforgeError(f"work item {message.item} of job {message.job_id} is for model {message.model}; "
                             f"this server serves {lm.name}")
    records = [PromptRecord.model_validate_json(line) for line in store.get_verified(message.prompts).splitlines()]
    runner = StudyRunner(lm, backend, store, message.run_key, message.params)
    if message.stage == "passes":
        runner.compute_batch(message.batch, records)
    else:
        for record in records:
            runner.compute_patches(record)
    return StudyWorkResult(prompt_ids=[record.prompt_id for record in records])


def patch_subset(records: list[PromptRecord], results: list[PromptResult], limit: int | None) -> PatchSubset:
    """The balanced high-P0 subset: P0 >= max(0.7, min(0.95, q75 of P0)); every success and min(S, F)
    failures, highest P0 first. Where that leaves nothing (a small model: no prompt reaches the threshold, or
    the few that do all fail), every prompt is a candidate, ranked by P0, recorded in the rule. `limit` keeps
    the first prompts of the alternation."""
    p0 = np.array([r.p0 for r in records])
    threshold = max(0.7, min(0.95, float(np.quantile(p0, 0.75))))
    ranked = sorted(range(len(records)), key=lambda i: -p0[i])
    high = [i for i in ranked if p0[i] >= threshold]
    successes, chosen_f = _balanced(high, results)
    fallback = None
    if not successes:
        fallback = (f"no prompt reaches P0 >= {threshold:.2f}" if not high else
                    f"none of the {len(high)} prompts at P0 >= {threshold:.2f} succeeds") + \
            "; gate off, prompts ranked by P0 instead"
        successes, chosen_f = _balanced(ranked, results)
    # Successes and failures alternate, so a limit keeps the balance.
    order = [i for pair in zip(successes, chosen_f) for i in pair] + successes[len(chosen_f):]
    if limit is not None:
        order = order[:limit]
    return PatchSubset(threshold=threshold, fallback=fallback, prompts=[records[i].prompt_id for i in order],
                       successes=sum(i in successes for i in order), failures=sum(i in chosen_f for i in order))


def _balanced(candidates: list[int], results: list[PromptResult]) -> tuple[list[int], list[int]]:
    """Every success among the candidates (in their order) and as many of their failures, no more."""
    failures = [i for i in candidates if results[i].outcome == "failure"]
    successes = [i for i in candidates if results[i].outcome == "success"]
    return successes, failures[:min(len(successes), len(failures))]


def outputs(records: list[PromptRecord], results: list[PromptResult], subset: PatchSubset,
            patches: list[PromptPatches], params, lm, key: str, heads: dict, clock: dict) -> dict[str, bytes]:
    from flawforge.pressure import figures, tables

    completions = "".join(
        json.dumps({"prompt_id": res.prompt_id, "condition": condition, "sample": i, "token_ids": s.ids,
                    "text": s.text, "violation": bool(detector.find_word(s.text, rec.target_word))}) + "\n"
        for rec, res in zip(records, results) for condition in CONDITIONS
        for i, s in enumerate(res.conditions[condition].samples)).encode()
    per_prompt = "".join(json.dumps(tables.prompt_row(rec, res)) + "\n" for rec, res in zip(records, results)).encode()
    kinds = {name: {"reference": kind.reference, "label": kind.label} for name, kind in PATCH_KINDS.items()}
    table = tables.build_tables(records, results, subset, patches, params, heads, kinds=kinds, lm_name=lm.name,
                                num_layers=lm.model.config.num_hidden_layers, trace_prefix=f"{key}/traces",
                                clock=clock)
    files = {"completions.jsonl": completions, "prompt_metrics.jsonl": per_prompt,
             "prompts.jsonl": "".join(r.model_dump_json() + "\n" for r in records).encode(),
             "tables.json": json.dumps(table, indent=1).encode()}
    images = figures.all_figures(table)
    files.update(images)
    files["report.md"] = tables.report(table, sorted(images)).encode()
    return files
