"""LM-rewritten bugs: a model's rewrite of one function is a candidate only when it is that function, changed; on
inflection, with the gateway in replay mode on replies recorded here, rewrites are validated end to end (verdict and
final gate) and a reply that renames the function is a reject saying so."""
from __future__ import annotations

import json

import pytest

from flawforge.debugging.modifiers import REGISTRY, apply_edits, sites_of
from flawforge.debugging.modifiers.lm_rewrite import LmRewrite
from flawforge.proto.debugging import RewriteReply

SOURCE = '''class Table:
    @staticmethod
    def clamp(value, low, high):
        if value < low:
            return low
        if value > high:
            return high
        return value
'''


def site():
    return next(s for s in sites_of("m.py", SOURCE) if s.qualname == "Table.clamp")


@pytest.mark.parametrize("code, why", [
    ("def clamp(value, low, high):\n    return value\n\ndef other():\n    pass\n", "not one function"),
    ("def clip(value, low, high):\n    return min(max(value, low), high)\n", "name or parameters"),
    ("def clamp(value, low):\n    return value\n", "name or parameters"),
    ("def clamp(value, low, high:\n", "does not parse"),
    ("def clamp(value, low, high):\n    if value < low:\n        return low\n    if value > high:\n"
     "        return high\n    return value\n", "changes nothing"),
])
def test_a_reply_that_is_not_a_rewrite_of_the_function_is_refused(code, why):
    with pytest.raises(ValueError, match=why):
        LmRewrite("m").bug(site(), RewriteReply(code=code, explanation="x"))


def test_a_rewrite_replaces_the_function_where_it_is_and_keeps_its_decorators():
    code = ("```python\ndef clamp(value, low, high):\n    if value <= low:\n        return low\n    if value > high:\n"
            "        return high\n    return value\n```")
    bug = LmRewrite("m").bug(site(), RewriteReply(code=code, explanation="A bound is inclusive."))
    assert apply_edits(SOURCE, bug.edits) == SOURCE.replace("value < low", "value <= low")
    assert bug.description == "in Table.clamp, rewritten by m: A bound is inclusive."


@pytest.mark.slow
def test_rewrites_from_recorded_replies_are_validated_end_to_end(shared_data, tmp_path):
    from flawforge.blobstore.local import LocalBlobStore
    from flawforge.debugging.candidates import candidates_of
    from flawforge.debugging.environments import EnvironmentBuilder
    from flawforge.debugging.generate import generate_for_library
    from flawforge.debugging.layout import layout_of, name_and_version, read_archive
    from flawforge.llm.cache import ResponseCache, fingerprint
    from flawforge.llm.gateway import Gateway
    from flawforge.sandbox.suites import suite_sandbox
    from flawforge.proto.llm import ChatResult
    from flawforge.settings import Settings

    from .test_pipeline import assert_instances_hold

    name = "inflection-0.5.1.tar.gz"
    archive = (shared_data / "python-libraries" / name).read_bytes()
    files = read_archive(archive)
    layout = layout_of(*name_and_version(name), list(files))
    modules = {p: files[p].decode() for p in layout.modules}
    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path / "blobs"), llm_replay=True)
    store = LocalBlobStore(str(tmp_path / "blobs"))
    rewrite = LmRewrite("bug-writer")
    schema = {"response_schema": RewriteReply.model_json_schema()}
    recorded, renamed = 0, None
    for path, source in modules.items():
        for place in sites_of(path, source):
            if not rewrite.applies(place):
                continue
            # The reply a model would write: the function with one of the procedural modifiers' changes in it.
            changed = next((c for c in candidates_of({path: source}, REGISTRY) if c.qualname == place.qualname
                            and any(s.qualname == place.qualname for s in sites_of(path, c.buggy_source))), None)
            if changed is None:
                continue
            new = next(s for s in sites_of(path, changed.buggy_source) if s.qualname == place.qualname)
            code = new.segment(new.node)
            if renamed is None:
                code, renamed = code.replace(f"def {new.node.name}(", f"def {new.node.name}_v2(", 1), place.qualname
            reply = json.dumps({"code": code, "explanation": changed.description})
            request = rewrite.request(place).model_copy(update=schema)
            ResponseCache(store).put(ChatResult(fingerprint=fingerprint(request), provider="recorded",
                                                model="bug-writer", content=reply))
            recorded += 1
    assert recorded >= 3
    gateway = Gateway.from_settings(store, settings)
    built = EnvironmentBuilder.from_settings().for_library(files, "inflection")
    try:
        result = generate_for_library(
            suite_sandbox(), archive, name, 6, ["lm_rewrite"], 0, 2, environment=built.environment,
            environment_path=built.path,
            rewrites=lambda mods, executed: rewrite.candidates(gateway, mods, executed, 100, 0, "inflection-0.5.1"))
    finally:
        gateway.close()
    assert result.instances and {i.modifier for i in result.instances} == {"lm_rewrite"}
    assert all("rewritten by bug-writer" in i.description for i in result.instances)
    refused = [r for r in result.rejects if r.reason == "invalid_rewrite"]
    assert [r.qualname for r in refused] == [renamed] and "name or parameters" in refused[0].detail
    assert result.tried_by_modifier == {"lm_rewrite": min(6, recorded - 1)}
    (tmp_path / "libraries").mkdir()
    (tmp_path / "libraries" / name).write_bytes(archive)
    assert_instances_hold(result.instances, tmp_path / "libraries")
