"""Two shortcuts for the Triton interpreter (TRITON_INTERPRET=1, triton 3.6) that the CPU tests
install before they run the kernels; each gives the interpreter's own results, faster.

1. Integer reductions with a custom combine function (`tl.sort`'s `xor_sum`, the kernels'
   `_add2` and `_min_max` tuples) run in the interpreter's `generic_reduce`, which calls the
   combine function once per element in Python: `tl.sort` of a 64-wide block took over a
   second, and the sorts were most of a verify call's minute. Here, where every input is an
   integer and the reduced length a power of two (always, for a Triton block), the
   combine function runs once per level of a pairwise tree on whole numpy arrays, the
   pairs in index order. An associative combine (which `tl.reduce` requires) over integers
   gives the same values in any grouping, bit for bit; floats and other lengths keep the
   interpreter's own path.
2. Every call of a `@triton.jit` helper re-patches `triton.language` (`_patch_lang`: an
   `inspect.getmembers` walk), although the kernel's launch patched it already and the patch
   is not undone until the launch ends. Here, a helper whose language modules the running
   launch has patched skips the walk.

`tests/test_sampler_interpret_fast.py` runs kernels with and without them.
"""

from __future__ import annotations

import inspect

import numpy as np

_installed = False


def install() -> None:
    """Install both shortcuts (once; before any kernel runs under the interpreter)."""
    global _installed
    if _installed:
        return
    import triton.language as tl
    from triton.runtime import interpreter as itp

    reduce_impl = itp.ReduceOps.apply_impl

    def apply_impl(self, input):
        fast = _tree_reduce(self, input, tl)
        return reduce_impl(self, input) if fast is None else fast

    itp.ReduceOps.apply_impl = apply_impl

    patch_lang = itp._patch_lang
    patched: list[set[int]] = []  # the language modules patched by the running launch

    class _Unchanged:
        def restore(self) -> None:
            pass

    def _langs(fn) -> set[int]:
        return {id(v) for v in fn.__globals__.values()
                if inspect.ismodule(v) and (v is tl or v is tl.core)}

    def fast_patch_lang(fn):
        langs = _langs(fn)
        if patched and langs <= patched[-1]:
            return _Unchanged()
        scope = patch_lang(fn)
        if patched:
            patched[-1] |= langs
        return scope

    launch = itp.GridExecutor.__call__

    def grid_call(self, *args, **kwargs):
        patched.append(set())
        try:
            return launch(self, *args, **kwargs)
        finally:
            patched.pop()

    itp._patch_lang = fast_patch_lang
    itp.GridExecutor.__call__ = grid_call
    _installed = True


def _tree_reduce(op, input, tl):
    """`op` (an interpreter `ReduceOps`) over `input` (a tuple of tensors) by a pairwise tree,
    or None where the interpreter's own path must run."""
    if op.combine_fn in _builtin_combines(tl):
        return None  # (the interpreter's numpy paths)
    if not all(t.dtype.is_int() for t in input):
        return None
    datas = [t.handle.data for t in input]
    axis = op.axis
    if axis is None:
        datas = [d.reshape(-1) for d in datas]
        axis = 0
    n = datas[0].shape[axis]
    if n & (n - 1) or n == 0:
        return None
    while n > 1:
        left = [op.to_tensor(np.take(d, np.arange(0, n, 2), axis=axis), t.dtype)
                for d, t in zip(datas, input)]
        right = [op.to_tensor(np.take(d, np.arange(1, n, 2), axis=axis), t.dtype)
                 for d, t in zip(datas, input)]
        out = op.combine_fn.fn(*left, *right)
        out = out if isinstance(out, tuple) else (out,)
        # (the interpreter stores each combined value in an array of the input's dtype)
        datas = [np.broadcast_to(o.handle.data if isinstance(o, tl.core.tensor) else o,
                                 lft.handle.data.shape).astype(d.dtype)
                 for o, lft, d in zip(out, left, datas)]
        n //= 2
    res = []
    for d, t in zip(datas, input):
        if op.keep_dims:
            if op.axis is None:
                d = d.reshape((1,) * t.handle.data.ndim)
        else:
            d = np.squeeze(d, axis)
            if op.axis is None:
                d = d.item()
        res.append(op.to_tensor(d, t.dtype))
    return res


def _builtin_combines(tl) -> tuple:
    s = tl.standard
    return (s._argmin_combine_tie_break_left, s._argmax_combine_tie_break_left,
            s._elementwise_max, s._elementwise_min, s._sum_combine)
