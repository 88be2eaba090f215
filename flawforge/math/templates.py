"""Formalization templates on disk: `tierN/<index>/<model>.py` (solve()) + `<model>.json` (logical_steps)."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flawforge.errors import FlawforgeError
from flawforge.inputs import InputRefused, read_input
from flawforge.math.gsm8k import GSM8KProblem
from flawforge.math.validation import PendingValidation, start_validation
from flawforge.proto.math import ProblemTemplate, Reject, TemplateValidation

DEFAULT_MODEL_PREFERENCE = ("google_gemini-2.5-flash", "openai_gpt-4.1")
TEMPLATE_FILE_BYTES = 1 << 20  # a template's code or its steps

_TIER_FOLDER = re.compile(r"^tier\d+$")


class TemplateFolderError(FlawforgeError):
    pass


class InvalidTemplate(Exception):
    """A template's files cannot be used; the message says why (it becomes a reject's detail)."""


@dataclass(frozen=True)
class TemplateFiles:
    """One model's template for one problem; either file may be missing."""

    tier: str
    problem_index: int
    model: str
    code_path: str
    steps_path: str
    folder: str  # the template folder both files must stay in, resolved

    def read(self) -> tuple[str, list[dict]]:
        """The code and the logical steps; raises InvalidTemplate naming what is wrong. Each file is a regular
        file inside the template folder, at most TEMPLATE_FILE_BYTES (a link out of the folder is refused)."""
        try:
            code = read_input(self.code_path, TEMPLATE_FILE_BYTES, within=self.folder).decode("utf-8")
            steps_text = read_input(self.steps_path, TEMPLATE_FILE_BYTES, within=self.folder).decode("utf-8")
        except FileNotFoundError as exc:
            raise InvalidTemplate(f"missing file {os.path.basename(exc.filename)}") from None
        except (InputRefused, OSError, UnicodeDecodeError) as exc:
            raise InvalidTemplate(f"unreadable file: {exc}") from None
        return code, parse_logical_steps(steps_text)


def parse_logical_steps(text: str) -> list[dict]:
    try:
        steps = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidTemplate(f"logical steps are not JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(steps, list) or not steps or not all(isinstance(step, dict) for step in steps):
        raise InvalidTemplate("logical steps must be a non-empty JSON list of objects")
    return steps


def _folders(path: str | Path) -> list[os.DirEntry]:
    with os.scandir(path) as entries:
        return [entry for entry in entries if entry.is_dir()]


class TemplateFolder:
    """Index of a template folder: its tier and problem folders at once, a problem folder's files when they
    are first asked about (listing all 2,500 problem folders of the shared corpus up front held a job's first
    work item back by up to a sixth of a second), a template's files only when it is read."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        if not self.root.is_dir():
            raise TemplateFolderError(f"template folder not found: {self.root}")
        # Resolved once: a template's files are then checked against it part by part below it (inputs.read_input).
        self.real_root = os.path.realpath(self.root)
        self._tiers: dict[int, list[str]] = {}  # problem index -> tiers with a folder for it
        # os.scandir tells folders from files without a stat per entry
        for tier_entry in _folders(self.root):
            if _TIER_FOLDER.match(tier_entry.name):
                for index_entry in _folders(tier_entry.path):
                    if index_entry.name.isdigit():
                        self._tiers.setdefault(int(index_entry.name), []).append(tier_entry.name)
        if not self._tiers:
            raise self._empty()
        self._models: dict[tuple[str, int], frozenset[str]] = {}

    def _empty(self) -> TemplateFolderError:
        return TemplateFolderError(f"no templates in {self.root} (expected tierN/<index>/<model>.py)")

    def indices(self) -> list[int]:
        """Every problem with a template (lists every problem folder); raises if there is none."""
        found = [index for index in sorted(self._tiers) if self.tiers_of(index)]
        if not found:
            raise self._empty()
        return found

    def extent(self) -> range:
        """From the first problem with a template to the last (lists the problem folders at both ends); raises
        if there is none."""
        ordered = sorted(self._tiers)
        first = next((index for index in ordered if self.tiers_of(index)), None)
        if first is None:
            raise self._empty()
        return range(first, next(index for index in reversed(ordered) if self.tiers_of(index)) + 1)

    def tiers_of(self, index: int) -> list[str]:
        return sorted(tier for tier in self._tiers.get(index, ()) if self.models(tier, index))

    def models(self, tier: str, index: int) -> set[str]:
        key = (tier, index)
        if key not in self._models:  # threads asking at once list the folder twice, to the same effect
            found: set[str] = set()
            if tier in self._tiers.get(index, ()):
                folder = os.path.join(self.real_root, tier, str(index))
                try:
                    with os.scandir(folder) as entries:
                        found = {stem for stem, suffix in map(os.path.splitext, (e.name for e in entries))
                                 if suffix in (".py", ".json")}
                except (FileNotFoundError, NotADirectoryError):
                    pass  # removed since the index was made: no template (the problem's reject says so)
                except OSError as exc:
                    raise TemplateFolderError(f"cannot list {folder}: {exc}") from None
            self._models[key] = frozenset(found)
        return set(self._models[key])

    def files(self, tier: str, index: int, model: str) -> TemplateFiles:
        stem = os.path.join(self.real_root, tier, str(index), model)
        return TemplateFiles(tier=tier, problem_index=index, model=model, code_path=f"{stem}.py",
                             steps_path=f"{stem}.json", folder=self.real_root)

    def in_preference_order(self, tier: str, index: int, preference: tuple[str, ...] | list[str]) -> list[TemplateFiles]:
        """This problem's templates by the models in `preference`, most preferred first."""
        available = self.models(tier, index)
        return [self.files(tier, index, model) for model in preference if model in available]


def problem_template(problem: GSM8KProblem, tier: str, model: str, code: str, steps: list[dict]) -> ProblemTemplate:
    return ProblemTemplate(problem_index=problem.index, tier=tier, template_model=model, question=problem.question,
                           gsm8k_answer=problem.answer, final_answer=problem.final_answer, code=code,
                           logical_steps=steps)


@dataclass
class TemplateChoice:
    """The first valid template in preference order, with the verdicts and rejects on the way."""

    template: ProblemTemplate | None
    verdicts: list[TemplateValidation]
    rejects: list[Reject]
    run: Any = None  # the sandbox's traced run of the chosen template's solve()


def choose_template(problem: GSM8KProblem, tier: str, folder: TemplateFolder, preference: tuple[str, ...] | list[str],
                    sandbox) -> TemplateChoice:
    return choose_templates([(problem, tier)], folder, preference, sandbox)[0]


@dataclass
class _Choosing:
    """One problem's way through its templates in preference order."""

    problem: GSM8KProblem
    tier: str
    files: list[TemplateFiles]
    choice: TemplateChoice

    def next_check(self) -> tuple[TemplateFiles, str, list[dict], PendingValidation] | None:
        """The next template that needs sandbox runs; the ones before it that fail without are recorded."""
        while self.files:
            template_files = self.files.pop(0)
            try:
                code, steps = template_files.read()
            except InvalidTemplate as exc:
                self.reject(template_files, "invalid_template", str(exc))
                continue
            check = start_validation(problem_index=self.problem.index, template_model=template_files.model,
                                     gsm8k_answer=self.problem.answer, code=code, logical_steps=steps)
            if isinstance(check, PendingValidation):
                return template_files, code, steps, check
            self.choice.verdicts.append(check)
            self.reject(template_files, check.reason, check.detail)
        return None

    def reject(self, template_files: TemplateFiles, reason: str, detail: str) -> None:
        self.choice.rejects.append(Reject(problem_index=self.problem.index, tier=self.tier,
                                          template_model=template_files.model, reason=reason, detail=detail))


def choose_templates(problems: list[tuple[GSM8KProblem, str]], folder: TemplateFolder,
                     preference: tuple[str, ...] | list[str], sandbox) -> list[TemplateChoice]:
    """choose_template for each (problem, tier), in order. Their templates are validated together: one
    sandbox batch for every problem's preferred template, then one for the next template of those still
    without a valid one, and so on."""
    choosing = []
    for problem, tier in problems:
        files = folder.in_preference_order(tier, problem.index, preference)
        choice = TemplateChoice(None, [], [])
        if not files:
            found = [f"{t}: {', '.join(sorted(folder.models(t, problem.index)))}" for t in folder.tiers_of(problem.index)]
            detail = f"no template by {', '.join(preference)} in {tier}/{problem.index}"
            choice.rejects.append(Reject(problem_index=problem.index, tier=tier, reason="missing_template",
                                         detail=detail + (f" (found {'; '.join(found)})" if found else "")))
        choosing.append(_Choosing(problem, tier, files, choice))
    while True:
        checks = []
        for state in choosing:
            if state.choice.template is None and (check := state.next_check()) is not None:
                checks.append((state, *check))
        if not checks:
            break
        programs = [program for *_, pending in checks for program in pending.programs]
        # Validation runs beside the mutator's generation processes, which keep every core busy: splitting
        # the batch over units would only add forks (measured on the whole corpus: a third of the units' CPU).
        results = iter(sandbox.trace_batch(programs[0], programs[1:], func="solve", parallel=False))
        for state, template_files, code, steps, pending in checks:
            verdict, run = pending.finish([next(results) for _ in pending.programs])
            state.choice.verdicts.append(verdict)
            if verdict.valid:
                state.choice.template = problem_template(state.problem, state.tier, template_files.model, code, steps)
                state.choice.run = run
            else:
                state.reject(template_files, verdict.reason, verdict.detail)
    return [state.choice for state in choosing]
