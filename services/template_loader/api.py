"""The template-loader's HTTP API: check a template against its GSM8K solution."""
from __future__ import annotations

from functools import lru_cache

from fastapi import APIRouter
from fastapi.exceptions import RequestValidationError

from flawforge.math.gsm8k import final_answer_value
from flawforge.math.validation import validate_template
from flawforge.proto.math import TemplateValidation, ValidateTemplateRequest
from flawforge.runtime.platform import Platform
from flawforge.sandbox.maximums import AboveMaximum, Maximums


def templates_router(platform: Platform) -> APIRouter:
    router = APIRouter(prefix="/templates", tags=["templates"])

    @lru_cache(maxsize=1)
    def sandbox():  # started on first use: an app that never validates needs no sandbox process
        from flawforge.sandbox import Sandbox

        return Sandbox.from_settings(platform.settings)

    @router.post("/validate")
    def validate(body: ValidateTemplateRequest) -> TemplateValidation:
        """Runs the template in the sandbox: answer, logical-step consistency, and the original project's
        structural and semantic scores. An unusable template is a 200 answer with `valid: false` and a reason."""
        try:
            Maximums.from_settings(platform.settings).check(body)
        except AboveMaximum as exc:
            raise RequestValidationError(exc.errors) from None
        if final_answer_value(body.gsm8k_answer) is None:
            raise RequestValidationError([{"type": "value_error", "loc": ("body", "gsm8k_answer"), "input": None,
                                           "msg": "must end with '#### <number>', GSM8K's final answer"}])
        return validate_template(problem_index=body.problem_index, template_model=body.template_model,
                                 gsm8k_answer=body.gsm8k_answer, code=body.code, logical_steps=body.logical_steps,
                                 sandbox=sandbox())

    return router
