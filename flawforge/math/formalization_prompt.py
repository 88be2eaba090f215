"""The templates pipeline's prompt: the request that asks a model for a formalization template of a GSM8K
problem (its reply's schema is FormalizationReply, in flawforge.proto.math).

The rules are the ones the templates in the formalization-templates data follow: a straight-line
solve() whose `# L<k>` blocks mirror the solution lines, numbers from the question quoted in
inline comments, a `# FA` block for the answer, and per line a template with {var} placeholders.
"""
from __future__ import annotations

import json

from flawforge.proto.llm import ChatMessage, ChatRequest

RULES = """You turn a grade-school math problem and its step-by-step solution into a formalization template.

Reply with one JSON object with two keys, "code" and "logical_steps", and nothing else.

"code" is Python source defining `def solve():`, following these rules:
1. The body is straight-line code: only assignments of a variable to a number or to arithmetic on earlier
   variables. No loops, no if, no imports, no helper functions, no print.
2. Start with a docstring: `Index: <index>.` then `Returns: <what the answer is>.`
3. Each line k of the solution gets a block starting with the comment `# L<k>`, in order, that computes
   what that line computes.
4. Every number taken from the question is assigned to its own descriptively named variable, with an inline
   comment quoting the words of the question it comes from, e.g. `num_workers = 2 # two workers`.
   A number that is common knowledge (e.g. 7 days in a week) is a variable too, with a comment saying so.
5. End with a `# FA` block: `answer = <variable holding the final answer>` and `return answer`.

"logical_steps" has one object per solution line, in order, with:
- "line_number": "L<k>", the line it describes;
- "question_inputs": variables of that line whose numbers come from the question;
- "WK_inputs": variables of that line whose numbers are common knowledge;
- "output_variable": the variable the line computes;
- "solution_line_template": the solution line, word for word, with each number replaced by the
  {variable} that holds it (including inside <<...>> calculator annotations).
"""


def problem_message(index: int, question: str, solution: str) -> str:
    return f"Index: {index}\n\nQuestion:\n{question}\n\nSolution:\n{solution}"


def example_reply(code: str, steps: list[dict]) -> str:
    return json.dumps({"code": code, "logical_steps": steps}, indent=1)


def formalization_request(*, model: str, index: int, question: str, solution: str,
                          examples: list[tuple[int, str, str, str, list[dict]]] = (), max_tokens: int = 1024,
                          temperature: float = 0.0) -> ChatRequest:
    """`examples` are (index, question, solution, code, logical_steps) of templates known to be valid,
    shown as earlier turns of the conversation."""
    messages = [ChatMessage(role="system", content=RULES)]
    for ex_index, ex_question, ex_solution, ex_code, ex_steps in examples:
        messages.append(ChatMessage(role="user", content=problem_message(ex_index, ex_question, ex_solution)))
        messages.append(ChatMessage(role="assistant", content=example_reply(ex_code, ex_steps)))
    messages.append(ChatMessage(role="user", content=problem_message(index, question, solution)))
    return ChatRequest(model=model, messages=messages, max_tokens=max_tokens, temperature=temperature)
