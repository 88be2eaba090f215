"""The templates pipeline's prompt: what a model is shown, and the reply's schema the gateway enforces."""
from __future__ import annotations

import json

from flawforge.math.formalization_prompt import formalization_request
from flawforge.proto.math import FormalizationReply


def test_formalization_request_shows_rules_examples_and_the_problem():
    req = formalization_request(model="m", index=2500, question="Q?", solution="A\n#### 1",
                                examples=[(1, "EQ?", "EA\n#### 2", "def solve():\n    return 2", [{"x": 1}])],
                                max_tokens=64)
    roles = [m.role for m in req.messages]
    assert roles == ["system", "user", "assistant", "user"]
    assert "# L<k>" in req.messages[0].content and "# FA" in req.messages[0].content
    assert json.loads(req.messages[2].content)["code"].startswith("def solve")
    assert "Index: 2500" in req.messages[3].content and req.max_tokens == 64
    assert FormalizationReply.model_json_schema()["required"] == ["code", "logical_steps"]
