"""Scenarios from the catalog: the request a model answers, the project its reply makes, the candidates in the
order the seed keeps them (the model's own variants, then operator inversions, then numeric perturbations)."""
from __future__ import annotations

import json
import re
from importlib import resources

from flawforge.debugging.candidates import Candidate, candidates_of, digest_of
from flawforge.debugging.conversation import deterministic_tar
from flawforge.debugging.realism import worth_trying
from flawforge.errors import FlawforgeError
from flawforge.proto.debugging import CatalogEntry, ScenarioReply
from flawforge.proto.llm import ChatMessage, ChatRequest

LLM_VARIANT = "llm_variant"
# After the model's variants, the seed's own injections, in its order.
INJECTED = ("op_invert", "numeric_perturb")
MAX_TOKENS = 4096
SYSTEM = ("You write small, self-contained, correct Python modules for STEM problems, with pytest tests. Reply with "
          "one JSON object only.")


def default_catalog() -> str:
    return resources.files("flawforge.debugging").joinpath("scenario_catalog.json").read_text()


def read_catalog(text: str, where: str = "catalog") -> list[CatalogEntry]:
    try:
        entries = [CatalogEntry.model_validate(e) for e in json.loads(text)["entries"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise FlawforgeError(f"{where}: not a catalog ({{'entries': [{{domain, topic, subtopic}}, ...]}}): "
                             f"{str(exc).splitlines()[0]}") from None
    if not entries:
        raise FlawforgeError(f"{where}: the catalog has no entries")
    return entries


def entry_id(entry: CatalogEntry) -> str:
    """A stable, file-name-safe name for the entry."""
    text = f"{entry.domain}--{entry.topic}--{entry.subtopic}".lower()
    return re.sub(r"[^a-z0-9-]+", "-", text).strip("-")


def scenario_request(entry: CatalogEntry, model: str, seed: int) -> ChatRequest:
    prompt = (f"Domain: {entry.domain}. Topic: {entry.topic}. Subtopic: {entry.subtopic}.\n"
              "Write a problem statement, a step-by-step solution outline, and a Python module (standard library "
              "only) with several cooperating functions that validate their inputs and raise ValueError on bad "
              "ones. Write pytest tests (a separate file that imports the module by its name) that check the "
              "results numerically and the validations. Optionally add buggy variants: the whole module with one "
              "realistic bug that the tests catch. Fields: problem_statement, outline (list of steps), module_name "
              "(snake_case), module_code, test_code, buggy_variants (list of {description, module_code}). "
              f"Variation seed: {seed}.")
    return ChatRequest(model=model, messages=[ChatMessage(role="system", content=SYSTEM),
                                              ChatMessage(role="user", content=prompt)],
                       max_tokens=MAX_TOKENS, temperature=0.7, seed=seed)


def project_files(reply: ScenarioReply) -> dict[str, bytes]:
    return {f"{reply.module_name}.py": reply.module_code.encode(),
            f"tests/test_{reply.module_name}.py": reply.test_code.encode()}


def project_archive(reply: ScenarioReply) -> bytes:
    """The scenario as a project, a gzip'ed tar with a top folder like an sdist's."""
    import gzip

    tar = deterministic_tar({f"scenario/{path}": data for path, data in project_files(reply).items()})
    return gzip.compress(tar, mtime=0)


def scenario_candidates(reply: ScenarioReply, per_kind: int) -> list[Candidate]:
    """The model's variants, then up to `per_kind` inversions and `per_kind` perturbations, in that order."""
    path = f"{reply.module_name}.py"
    found = [Candidate(LLM_VARIANT, path, reply.module_name, variant.description, variant.module_code,
                       digest_of(path, variant.module_code))
             for variant in reply.buggy_variants if variant.module_code != reply.module_code]
    for modifier in INJECTED:
        found += [c for c in candidates_of({path: reply.module_code}, [modifier])
                  if worth_trying(c, reply.module_code)][:per_kind]
    return found
