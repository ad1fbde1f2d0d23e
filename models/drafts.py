"""Draft proposers for speculative decoding.

Draft specs (``make_draft(spec, target, ...)``):
  ``self:N``      early exit: the target's first N layers + its final norm and LM head. In the
                  target's process and device it shares the target's weights (no copy); on
                  another device it is copied there.
  ``quant:int8``  the whole target with per-channel int8 weights: W8A8 with per-token
                  activation scales and exact int8 products on the CPU, weight-only on a GPU.
  ``ngram:N``     model-free prompt lookup: propose the tokens that followed the latest
                  earlier occurrence of the last N tokens (pays off on repetitive text).
  anything else   a model spec for ``load_model`` (embedded:..., a directory, a .gguf file):
                  a separate causal LM whose vocabulary must equal the target's.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from models.loader import LoadedModel, load_model
from models.transformer import CausalLM, from_hf

DRAFT_FORMS = "'self:N', 'quant:int8', 'ngram:N', or a model spec (see models.loader)"


@dataclass
class ModelDraft:
    """A draft that is a causal LM (run it with its own ``ModelRunner``)."""

    model: CausalLM
    spec: str


@dataclass
class NgramDraft:
    """Prompt-lookup drafting over a token history; needs no model and no cache."""

    n: int
    spec: str

    def propose(self, history: list[int], k: int) -> list[int]:
        """Up to ``k`` tokens that followed the latest earlier match of the last ``n``."""
        n = self.n
        if k <= 0 or len(history) <= n:
            return []
        tail = history[-n:]
        for start in range(len(history) - n - 1, -1, -1):
            if history[start:start + n] == tail:
                return history[start + n:start + n + k]
        return []


Draft = ModelDraft | NgramDraft


# A product of two int8 values (|v| <= 127) is at most 127 * 127; summed over at most this
# many terms, every partial sum is an integer below 2**24, which float32 holds exactly. So a
# float32 matmul over a slice of the inner dimension this long is exact in any summation order.
_EXACT_K = 2**24 // (127 * 127)  # 1040


def _int8_matmul_exact(xq: torch.Tensor, wq_t: torch.Tensor) -> torch.Tensor:
    """``xq @ wq_t`` for int8-valued float32 matrices [M, K] x [K, N], exactly, as int32
    (what ``torch._int_mm`` returns): float32 matmuls over inner slices of ``_EXACT_K``."""
    out = (xq[:, :_EXACT_K] @ wq_t[:_EXACT_K]).to(torch.int32)
    for k0 in range(_EXACT_K, xq.shape[1], _EXACT_K):
        out += (xq[:, k0:k0 + _EXACT_K] @ wq_t[k0:k0 + _EXACT_K]).to(torch.int32)
    return out


_CPU_INT_MM: bool | None = None  # whether this CPU multiplies int8 faster with torch._int_mm


def _cpu_int_mm_is_faster() -> bool:
    """Time both exact products once per process (the best of three on a [16, 1024] x
    [1024, 1024] product). torch's CPU ``_int_mm`` speed depends on the instruction set: on an
    AVX2-only AMD EPYC (torch 2.13) it took 3 s for 16 tokens through SmolLM2's LM head where
    the float32 slices take 50 ms. Both give the same int32, so the choice changes only speed."""
    global _CPU_INT_MM
    if _CPU_INT_MM is None:
        a = torch.ones(16, 1024, dtype=torch.int8)
        b = torch.ones(1024, 1024, dtype=torch.int8)
        af, bf = a.float(), b.float()

        def best(fn) -> float:
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return min(times)

        _CPU_INT_MM = best(lambda: torch._int_mm(a, b)) < best(lambda: _int8_matmul_exact(af, bf))
    return _CPU_INT_MM


class Int8Linear(nn.Module):
    """Int8 linear layer: per-output-channel symmetric int8 weights.

    On the CPU the activations are quantised too, per row (per token), and the int8 x int8
    products are summed exactly (int32), so each row's result depends on that row alone and a
    batched draft proposes exactly what it would alone (seeded requests repeat across batch
    compositions). The exact sum runs through ``torch._int_mm`` or float32 matmuls over inner
    slices (``_int8_matmul_exact``, with a float32 copy of the int8 weights), whichever this CPU
    does faster (``_cpu_int_mm_is_faster``). Elsewhere it is weight-only (dequantised on the
    fly).
    """

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach().float()
        scale = w.abs().amax(dim=1).clamp(min=1e-8) / 127.0
        self.qweight: torch.Tensor
        self.qweight_t: torch.Tensor
        self.scale: torch.Tensor
        q = torch.round(w / scale[:, None]).to(torch.int8)
        self.register_buffer("qweight", q)  # [N, K]
        self.register_buffer("qweight_t", q.t().contiguous())  # [K, N] for _int_mm
        self.register_buffer("scale", scale)  # [N] float32
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone())
        self._qweight_t_f32: torch.Tensor | None = None

    def qweight_t_f32(self) -> torch.Tensor:
        """The int8 weights [K, N] as float32 for ``_int8_matmul_exact``, made once (by
        ``quantize_int8`` where this CPU takes that path)."""
        if self._qweight_t_f32 is None:
            self._qweight_t_f32 = self.qweight_t.float()
        return self._qweight_t_f32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cpu":
            flat = x.reshape(-1, x.shape[-1]).float()
            xs = flat.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127.0
            xq = torch.round(flat / xs)  # int8 values (|v| <= 127), held as float32
            if _cpu_int_mm_is_faster():
                acc = torch._int_mm(xq.to(torch.int8), self.qweight_t)
            else:
                acc = _int8_matmul_exact(xq, self.qweight_t_f32())
            out = acc.float() * xs * self.scale
            out = out.view(*x.shape[:-1], -1).to(x.dtype)
        else:
            w = self.qweight.to(x.dtype) * self.scale.to(x.dtype)[:, None]
            out = nn.functional.linear(x, w)
        return out if self.bias is None else out + self.bias.to(x.dtype)


def quantize_int8(model: CausalLM, device: torch.device) -> CausalLM:
    """A copy of ``model`` with int8 weights for every linear layer (``Int8Linear``)."""
    qmodel = copy.deepcopy(model).to(device)
    for module in list(qmodel.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, child_name, Int8Linear(child))
    if torch.device(device).type == "cpu" and not _cpu_int_mm_is_faster():
        # (the timing and the float32 copies here, at construction, not in the first step)
        for module in qmodel.modules():
            if isinstance(module, Int8Linear):
                module.qweight_t_f32()
    return qmodel.eval()


def check_same_vocab(target_tok: Any, draft_tok: Any, target_vocab: int, draft_vocab: int) -> None:
    if target_vocab != draft_vocab or target_tok.get_vocab() != draft_tok.get_vocab():
        raise ValueError(
            f"draft vocabulary does not match the target's: target vocab size {target_vocab}, "
            f"draft vocab size {draft_vocab}"
            + ("" if target_vocab != draft_vocab else " (same size, different token ids)")
        )


def _int_arg(spec: str, prefix: str) -> int:
    try:
        n = int(spec[len(prefix):])
    except ValueError:
        raise ValueError(f"bad draft spec {spec!r}: expected {prefix}N with N an integer") from None
    if n < 1:
        raise ValueError(f"bad draft spec {spec!r}: N must be >= 1")
    return n


def make_draft(spec: str, target: LoadedModel, target_lm: CausalLM | None = None,
               device: str | torch.device | None = None,
               dtype: torch.dtype | None = None) -> Draft:
    """Build the draft named by ``spec`` for ``target`` (see module docstring)."""
    if spec.startswith("ngram:"):  # model-free: needs nothing of the target
        return NgramDraft(_int_arg(spec, "ngram:"), spec)
    target_lm = target_lm if target_lm is not None else from_hf(target.model)
    param = next(target_lm.parameters())
    device = torch.device(device) if device is not None else param.device
    dtype = dtype or param.dtype
    if spec.startswith("self:"):
        lm = from_hf(target.model, num_layers=_int_arg(spec, "self:"))
        return ModelDraft(lm.to(device=device, dtype=dtype), spec)
    if spec == "quant:int8":
        return ModelDraft(quantize_int8(target_lm, device), spec)
    if spec.startswith("quant:"):
        raise ValueError(f"unknown quantised draft {spec!r}: only 'quant:int8' exists")
    try:
        loaded = load_model(spec, device=device, dtype=dtype)
    except (ValueError, FileNotFoundError) as err:
        raise ValueError(f"bad draft spec {spec!r}: expected {DRAFT_FORMS}. ({err})") from err
    check_same_vocab(target.tokenizer, loaded.tokenizer, target.vocab_size, loaded.vocab_size)
    return ModelDraft(from_hf(loaded.model), spec)
