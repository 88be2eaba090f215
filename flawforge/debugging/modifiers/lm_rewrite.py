"""LM-rewritten bugs (SWE-smith's lm_rewrite): a model rewrites one function with a subtle, realistic bug and says
what it did.

Unlike the procedural modifiers this one asks a model, so it is not in the registry every site is offered to: the
mutator asks it for a few functions the tests execute (a seeded choice), all at once through the gateway
(structured output, RewriteReply). A reply becomes a candidate only if it is one function of the same name and
parameters whose code differs from the original; its text replaces the function's lines (the decorators stay),
re-indented to the function's place. The candidate is then validated like any other (verdict, final gate) and
deduplicated by content.
"""
from __future__ import annotations

import ast
import random
import textwrap
from typing import Callable

from flawforge.debugging.candidates import Candidate, digest_of
from flawforge.debugging.modifiers.base import Bug, Site, TextEdit, apply_edits, sites_of
from flawforge.debugging.syntax import parse
from flawforge.proto.debugging import BugReject, RewriteReply
from flawforge.proto.llm import ChatMessage, ChatRequest

SYSTEM = ("You are an experienced Python developer who writes realistic bugs for debugging exercises. Reply with one "
          "JSON object only.")
MAX_TOKENS = 2048
# A function longer than this is not offered (the reply must hold all of it).
MAX_LINES = 80


class LmRewrite:
    name = "lm_rewrite"
    explanation = "A model rewrote the function with a subtle bug."
    min_complexity = 3

    def __init__(self, model: str):
        self.model = model

    def applies(self, site: Site) -> bool:
        return (not site.is_class and site.complexity >= self.min_complexity
                and site.node.end_lineno - site.node.lineno < MAX_LINES)

    def request(self, site: Site) -> ChatRequest:
        code = textwrap.dedent(site.segment(site.node))
        task = ("Rewrite this Python function with one subtle, realistic bug, the kind a careful developer could "
                "make and a test would catch: a wrong comparison or bound, a mistaken operator, a missing case, "
                "arguments in the wrong order. Keep its name and parameters, and keep it looking like ordinary "
                "code (no comments about the bug). Fields: code (the whole function, rewritten), explanation (what "
                "you changed, one sentence).")
        return ChatRequest(model=self.model, messages=[
            ChatMessage(role="system", content=SYSTEM),
            ChatMessage(role="user", content=f"{task}\n\nFunction `{site.qualname}` of `{site.path}`:\n```python\n"
                                             f"{code}\n```")], max_tokens=MAX_TOKENS, temperature=0.0)

    def bug(self, site: Site, reply: RewriteReply) -> Bug:
        """The reply as an edit of the function's lines; ValueError saying why a reply is not one."""
        text = textwrap.dedent(_unfenced(reply.code)).strip("\n") + "\n"
        try:
            tree = parse(text)
        except SyntaxError as exc:
            raise ValueError(f"the rewrite does not parse: {exc.msg} (line {exc.lineno})") from None
        functions = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        if len(tree.body) != 1 or len(functions) != 1:
            raise ValueError("the rewrite is not one function")
        new, old = functions[0], site.node
        if new.name != old.name or ast.dump(new.args) != ast.dump(old.args):
            raise ValueError(f"the rewrite changes the function's name or parameters ({new.name})")
        if [ast.dump(s) for s in new.body] == [ast.dump(s) for s in old.body]:
            raise ValueError("the rewrite changes nothing")
        body = "".join(text.splitlines(keepends=True)[new.lineno - 1:])  # from `def`: the decorators stay
        indent = site.indent_of(old)
        rewritten = "".join(indent + line if line.strip() else line for line in body.splitlines(keepends=True))
        end = old.end_lineno
        edit = TextEdit(old.lineno, 0, end, len(site.lines[end - 1].encode("utf-8")),
                        rewritten if site.lines[end - 1].endswith("\n") else rewritten.rstrip("\n"))
        return Bug((edit,), f"in {site.qualname}, rewritten by {self.model}: {reply.explanation.strip()}"[:500])

    def candidates(self, gateway, modules: dict[str, str], executed: Callable[[str, str], bool], count: int,
                   seed: int, project: str) -> tuple[list[Candidate], list[BugReject]]:
        """Up to `count` rewrites of functions `executed(path, qualname)` says the tests run, chosen with the seed,
        asked for at once; the replies that are not a rewrite of their function, and the requests that got none (a
        provider's error, a replay without a recording), as rejects: the library's other bugs do not depend on
        them."""
        sites = [site for path in sorted(modules) for site in _sites(path, modules[path])
                 if self.applies(site) and executed(path, site.qualname)]
        random.Random(f"{seed}:{project}:{self.name}").shuffle(sites)
        sites = sites[:count]
        if not sites:
            return [], []
        outcomes = gateway.structured_many([self.request(site) for site in sites], RewriteReply)
        found, rejects, seen = [], [], set()
        name, _, version = project.rpartition("-")
        for site, outcome in zip(sites, outcomes):
            try:
                bug = self.bug(site, outcome.value) if outcome.value is not None else None
            except ValueError as exc:
                bug, reason, detail = None, "invalid_rewrite", str(exc)
            else:
                reason, detail = "no_rewrite", str(outcome.error)
            if bug is None:
                rejects.append(BugReject(source=name, version=version, modifier=self.name, path=site.path,
                                         qualname=site.qualname, reason=reason, detail=detail[:1000]))
                continue
            buggy = apply_edits(modules[site.path], bug.edits)
            digest = digest_of(site.path, buggy)
            if digest not in seen:
                seen.add(digest)
                found.append(Candidate(self.name, site.path, site.qualname, bug.description, buggy, digest))
        return found, rejects


def _sites(path: str, source: str) -> list[Site]:
    try:
        return sites_of(path, source)
    except (SyntaxError, ValueError, RecursionError):
        return []


def _unfenced(code: str) -> str:
    """The code without a Markdown fence around it, which models add though asked for JSON fields."""
    lines = code.strip().splitlines()
    if len(lines) >= 2 and lines[0].startswith("```") and lines[-1].strip() == "```":
        return "\n".join(lines[1:-1])
    return code
