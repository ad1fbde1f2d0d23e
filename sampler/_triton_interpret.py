"""Compatibility shims for Triton 3.6's CPU interpreter (TRITON_INTERPRET=1). Only active
under the interpreter; no effect on GPU.

1. The interpreter converts a scalar used as a `range` bound with `int(array)`, which NumPy
   2.4 refuses for the 1-element arrays it holds.
2. `tl.exp` (and so the kernels' `_exp`) runs NumPy's float32 exp, which is not torch's:
   NumPy's SIMD expf is off by one ulp from the correctly rounded result on about 40% of
   float32 inputs, torch's CPU exp (SLEEF) on under 1%, so the two disagree on ~40% of the
   weights exp(x - M). The kernels' contract is that the weights they compare and draw are
   bit-identical to the torch backend's (on the GPU: libdevice expf, torch.exp's CUDA
   implementation); here float32 exp runs through torch.exp on the CPU, the torch
   backend's own function. Without it a top-p threshold between two weights one ulp apart
   splits differently (CPU fuzz case 30877 with `--ulp-groups`: 64 tokens whose NumPy
   weight equals the threshold's, one ulp below it in torch). Other dtypes keep NumPy's.
"""

from __future__ import annotations

import os

import numpy as np
import torch


def torch_exp(a: np.ndarray) -> np.ndarray:
    """exp of a NumPy array, float32 through torch.exp (the CPU reference's function)."""
    a = np.asarray(a)
    if a.dtype != np.float32:
        return np.exp(a)
    return torch.from_numpy(np.ascontiguousarray(a)).exp().numpy()


def install() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    from triton.runtime import interpreter

    scope = interpreter._LangPatchScope
    if getattr(scope, "_sonicspec_patched", False):
        return
    original = scope.set_attr

    def set_attr(self, obj, name, value):  # type: ignore[no-untyped-def]
        if name == "__index__":
            value = lambda t: int(t.handle.data.reshape(-1)[0])  # noqa: E731
        original(self, obj, name, value)

    scope.set_attr = set_attr  # type: ignore[method-assign]
    interpreter.InterpreterBuilder.create_exp = (  # type: ignore[method-assign]
        lambda self, arg: self.unary_op(arg, torch_exp))
    scope._sonicspec_patched = True  # type: ignore[attr-defined]
