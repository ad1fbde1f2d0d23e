"""Backend selection: `Sampler(backend=...)` and the module-level `sample` / `verify`."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

import torch

from sampler.batch import SamplingBatch
from sampler.outputs import SampleOutput, VerifyOutput
from sampler.torch_backend import DraftProbs

BACKENDS = ("torch", "triton", "auto")


def _load(name: str) -> ModuleType:
    if name == "torch":
        return importlib.import_module("sampler.torch_backend")
    try:
        return importlib.import_module("sampler.triton_backend")
    except ModuleNotFoundError as err:
        raise NotImplementedError("the triton backend is not available yet (issue 4)") from err


def resolve_backend(backend: str, device: torch.device | str | None = None) -> str:
    """'auto' -> 'triton' when the device is CUDA and the triton backend exists, else 'torch'."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend != "auto":
        return backend
    on_cuda = torch.device(device).type == "cuda" if device is not None else (
        torch.cuda.is_available())
    if on_cuda and importlib.util.find_spec("sampler.triton_backend") is not None:
        return "triton"
    return "torch"


class Sampler:
    """Chooses its backend once, at construction; then `sample` / `verify` dispatch to it."""

    def __init__(self, backend: str = "auto", device: torch.device | str | None = None) -> None:
        self.backend = resolve_backend(backend, device)
        self._impl = _load(self.backend)

    def sample(self, logits: torch.Tensor, batch: SamplingBatch) -> SampleOutput:
        """logits: [B, V] -> SampleOutput (see sampler.torch_backend.sample)."""
        return self._impl.sample(logits, batch)

    def verify(self, logits: torch.Tensor, draft_tokens: torch.Tensor, batch: SamplingBatch,
               draft_probs: DraftProbs = None,
               num_draft: torch.Tensor | None = None) -> VerifyOutput:
        """logits: [B, K+1, V] -> VerifyOutput (see sampler.torch_backend.verify)."""
        return self._impl.verify(logits, draft_tokens, batch, draft_probs, num_draft)


def sample(logits: torch.Tensor, batch: SamplingBatch, backend: str = "torch") -> SampleOutput:
    return Sampler(backend, logits.device).sample(logits, batch)


def verify(logits: torch.Tensor, draft_tokens: torch.Tensor, batch: SamplingBatch,
           draft_probs: DraftProbs = None, num_draft: torch.Tensor | None = None,
           backend: str = "torch") -> VerifyOutput:
    return Sampler(backend, logits.device).verify(logits, draft_tokens, batch, draft_probs,
                                                   num_draft)
