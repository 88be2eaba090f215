"""The GGUF model is dequantised once into a safetensors cache that later starts load."""
from __future__ import annotations

import json

import pytest
import torch

from flawforge.inference.loading import hf_folder, resolve_source

pytestmark = pytest.mark.model


def test_the_session_model_comes_from_the_safetensors_cache(lm, inference_settings):
    source = resolve_source("")
    folder = hf_folder(source, inference_settings.inference_cache_dir)
    assert lm.folder == folder and folder.parent.name == "models"
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    written = (folder / "model.safetensors").stat().st_mtime_ns
    assert hf_folder(source, inference_settings.inference_cache_dir) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == written  # found, not written again
    assert lm.model.dtype == torch.float32 and lm.context_length == 8192


@pytest.mark.slow
def test_the_cache_holds_exactly_the_dequantised_gguf_weights(lm):
    from transformers import AutoModelForCausalLM

    source = resolve_source("")
    direct = AutoModelForCausalLM.from_pretrained(source.path.parent, gguf_file=source.path.name, dtype=torch.float32)
    cached = dict(lm.model.named_parameters())
    for name, weight in direct.named_parameters():
        assert torch.equal(weight, cached[name]), name
