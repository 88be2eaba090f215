"""A debug-conversations run as standard datasets: SWE-bench-style rows, and a Hugging Face dataset card.

Pure: records in, rows and text out; the CLI reads the run's folder and writes the files.
"""
from __future__ import annotations

import json
import re
from collections import Counter

from flawforge.debugging.conversation import task_problem
from flawforge.proto.debugging import Conversation, Instance

LICENCE_FILES = re.compile(r"^(licen[cs]e|copying)(\.(txt|md|rst))?$", re.IGNORECASE)
UNKNOWN_LICENCE = "unknown"
# Phrases that name a licence in its own text, most specific first.
LICENCE_PHRASES = (
    ("GNU LESSER GENERAL PUBLIC LICENSE", "LGPL"),
    ("GNU AFFERO GENERAL PUBLIC LICENSE", "AGPL-3.0"),
    ("GNU GENERAL PUBLIC LICENSE", "GPL"),
    ("Apache License", "Apache-2.0"),
    ("Mozilla Public License", "MPL-2.0"),
    ("PYTHON SOFTWARE FOUNDATION LICENSE", "PSF-2.0"),
    ("free and unencumbered software released into the public domain", "Unlicense"),
    ("Permission is hereby granted, free of charge", "MIT"),
    ("Permission to use, copy, modify, and/or distribute", "ISC"),
    ("Permission to use, copy, modify, and distribute", "ISC"),
    ("Redistribution and use in source and binary forms", "BSD"),
)


def licence_name(text: str | None) -> str:
    """The licence a LICENSE file's text is (an SPDX-like name), 'other' for one not recognised, 'unknown' for
    no file."""
    if text is None:
        return UNKNOWN_LICENCE
    folded = " ".join(text.split()).lower()
    for phrase, name in LICENCE_PHRASES:
        if phrase.lower() in folded:
            if name in ("GPL", "LGPL"):
                version = re.search(r"version (\d)", folded)
                return f"{name}-{version.group(1)}.0" if version else name
            if name == "BSD":
                return "BSD-3-Clause" if "neither the name" in folded else "BSD-2-Clause"
            return name
    return "other"


def solver_columns(instance: Instance) -> dict:
    """How often a solver model fixed the instance (None where the run had no solver), and which model tried how
    many times."""
    solver = instance.solver
    return {"solve_rate": solver.solve_rate if solver else None, "solver": solver.model if solver else None,
            "solver_tries": solver.tries if solver else None}


def swe_bench_row(instance: Instance) -> dict:
    """One SWE-bench-style record: the gold patch is the fix; the tests are the project's own (no test patch);
    FAIL_TO_PASS and PASS_TO_PASS are JSON lists in strings, as SWE-bench keeps them."""
    return {"instance_id": instance.instance_id, "repo": instance.source, "version": instance.version,
            "base_commit": f"{instance.source}-{instance.version}", "patch": instance.fix_patch, "test_patch": "",
            "problem_statement": task_problem(instance), "hints_text": "",
            "FAIL_TO_PASS": json.dumps(instance.FAIL_TO_PASS), "PASS_TO_PASS": json.dumps(instance.PASS_TO_PASS),
            "environment": instance.environment.model_dump(mode="json"), "issue": instance.problem_statement,
            "difficulty": instance.difficulty.model_dump(mode="json") if instance.difficulty else None,
            **solver_columns(instance)}


def hf_row(instance: Instance, conversation: Conversation | None, licence: str) -> dict:
    """One row of the Hugging Face dataset: the instance, its task's problem statement, its conversation."""
    return {"instance_id": instance.instance_id, "source": instance.source, "version": instance.version,
            "licence": licence, "modifier": instance.modifier, "path": instance.path, "qualname": instance.qualname,
            "description": instance.description, "patch": instance.patch, "fix_patch": instance.fix_patch,
            "problem_statement": task_problem(instance), "FAIL_TO_PASS": instance.FAIL_TO_PASS,
            "PASS_TO_PASS": instance.PASS_TO_PASS, "failing_output": instance.failing_output,
            "python": instance.environment.python, "packages": instance.environment.packages,
            "issue": instance.problem_statement, "parts": instance.parts,
            "difficulty": instance.difficulty.estimate if instance.difficulty else None,
            "frame_distance": instance.difficulty.frame_distance if instance.difficulty else None,
            **solver_columns(instance),
            "messages": [m.model_dump(mode="json") for m in conversation.messages] if conversation else []}


def dataset_card(instances: list[Instance], licences: dict[tuple[str, str], str], data_path: str) -> str:
    """README.md of the Hugging Face folder: the YAML header `datasets` reads (configs, data files), then counts,
    sources with their licences, and modifiers."""
    sources = Counter((i.source, i.version) for i in instances)
    modifiers = Counter(i.modifier for i in instances)
    named = sorted(set(licences.values()))
    header = ["---", "configs:", "- config_name: default", "  data_files:", "  - split: train",
              f"    path: {data_path}", "license: other" if len(named) != 1 or named == [UNKNOWN_LICENCE]
              else f"license: {named[0].lower()}", "pretty_name: Flawforge debugging instances",
              "tags:", "- code", "- debugging", "---"]
    rows = [f"| {source} | {version} | {n} | {licences.get((source, version), UNKNOWN_LICENCE)} |"
            for (source, version), n in sorted(sources.items())]
    modifier_rows = [f"| {name} | {n} |" for name, n in sorted(modifiers.items())]
    solved = [i.solver for i in instances if i.solver]
    solver_note = (f"`solve_rate`: the share of {solved[0].tries} tries by {solved[0].model} after which the task's "
                   f"tests passed (mean {sum(s.solve_rate for s in solved) / len(solved):.2f} over {len(solved)} "
                   f"instances); `difficulty` is a hand-weighted estimate (0-10), not fitted to it." if solved else
                   "`difficulty` is a hand-weighted estimate (0-10); no solver model tried the tasks (`solve_rate` "
                   "is empty).")
    return "\n".join([
        *header, "", "# Flawforge debugging instances", "",
        "Bugs injected into Python projects, each proven per test in a sandbox: its FAIL_TO_PASS tests pass on the "
        "clean code and fail with the bug, its PASS_TO_PASS tests pass with it. `patch` makes the bug, `fix_patch` "
        "undoes it; `packages` (with `python`) is the environment the tests ran in; `messages` is a debugging "
        "conversation grounded in the instance.", "", solver_note, "",
        f"{len(instances)} instances from {len(sources)} sources, made by {len(modifiers)} modifiers.", "",
        "## Sources", "", "| source | version | instances | licence |", "|---|---|---|---|", *rows, "",
        "Licences are read from each source's LICENSE file ('unknown': none; 'other': not recognised). The code in "
        "each row keeps its source's licence.", "",
        "## Modifiers", "", "| modifier | instances |", "|---|---|", *modifier_rows, ""])
