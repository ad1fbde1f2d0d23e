"""Compatibility shim for Triton 3.6's CPU interpreter (TRITON_INTERPRET=1) with NumPy >= 2.4.

The interpreter converts a scalar used as a `range` bound with `int(array)`, which NumPy 2.4
refuses for the 1-element arrays it holds. Only active under the interpreter; no effect on GPU.
"""

from __future__ import annotations

import os


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
    scope._sonicspec_patched = True  # type: ignore[attr-defined]
