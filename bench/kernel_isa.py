"""Static instruction mix of the sampler kernels for sm_90, on a machine without a GPU.

Records the launches `triton_backend` makes for the benchmark workload (bench/sampler.py,
at a given V), compiles each for sm_90 and prints per kernel: registers, shared memory and
the SASS instruction counts by class. A proxy for the per-token cost of the tile kernel
when no GPU is at hand (the tile kernel has no loop: its instruction count is per tile).

    python bench/kernel_isa.py [--vocab 262144] [--verify] [--kernel _tile_kernel]
                               [--sass] [--path ADDR,.. --stop ADDR]
Environment knobs of the backend (SONICSPEC_*) apply as usual.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import inspect
import os
import re
import sys
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)
sys.path[0] = str(Path(__file__).resolve().parents[1])

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from bench.sampler import MIX, MIXES, make_batch  # noqa: E402
from bench.sass_path import path_length  # noqa: E402
from sampler import triton_backend as tri  # noqa: E402
from sampler import triton_kernels as tk  # noqa: E402

# the sampler's kernels: every JIT function of triton_kernels named *_kernel
KERNELS = tuple(name for name, obj in vars(tk).items()
                if name.endswith("_kernel") and isinstance(obj, JITFunction))
OP = r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)"  # a SASS line's opcode
CLASSES = {"load": r"^LD", "store": r"^ST", "atomic": r"^(ATOM|RED)", "shfl": r"^SHFL",
           "bar": r"^BAR", "mufu": r"^MUFU", "fp32": r"^F(ADD|MUL|FMA|MNMX|SETP|SEL)",
           "int": r"^(I|LOP|SHF|LEA|SEL|ISETP|IMAD)", "branch": r"^(BRA|BSSY|BSYNC|EXIT)"}


def type_of(value: object) -> str:
    """Triton's signature type of a launch argument."""
    if isinstance(value, torch.Tensor):
        return "*" + {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16",
                      torch.int64: "i64", torch.int32: "i32", torch.bool: "i1"}[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2**31 <= value < 2**31 else "i64"
    return "fp32"


Call = tuple[str, object, dict, dict, dict, dict]  # (name, kernel, signature, constexprs,
#                                                    attrs, the launch's compile options)


class Launch:
    """One recorded launch of a sampler kernel: its JIT function, positional arguments,
    keyword constexprs and the launch's compile options (num_warps, maxnreg, ...)."""

    def __init__(self, kernel: object, args: tuple, kwargs: dict) -> None:
        self.kernel = kernel
        self.name = kernel.fn.__name__
        self.params = inspect.signature(kernel.fn).parameters
        self.names = list(self.params)
        self.args = args
        self.kwargs = {k: v for k, v in kwargs.items() if k in self.params}
        self.options = {k: v for k, v in kwargs.items() if k not in self.params}

    def constexprs(self) -> dict[str, object]:
        """Every parameter past the positional arguments: given, else its default."""
        return {name: self.kwargs.get(name, self.params[name].default)
                for name in self.names[len(self.args):]}


@contextlib.contextmanager
def recording():
    """Within the block the sampler's kernels record their launches (a list of Launch,
    yielded) instead of running."""
    launches: list[Launch] = []

    class Recorder:
        def __init__(self, kernel: object) -> None:
            self.kernel = kernel

        def __getitem__(self, grid: object):
            def launch(*args: object, **kwargs: object) -> None:
                launches.append(Launch(self.kernel, args, kwargs))
            return launch

    saved = {name: getattr(tk, name) for name in KERNELS}
    for name in KERNELS:
        setattr(tk, name, Recorder(saved[name]))
    try:
        yield launches
    finally:
        for name, kernel in saved.items():
            setattr(tk, name, kernel)


def signature(call: Launch) -> tuple[dict, dict, dict]:
    """(signature, constexprs, attrs) of a launch as the JIT specialises it: ints equal to 1
    become constants (unless the kernel says not to specialise them); ints and (GPU, 256-byte
    aligned) pointers divisible by 16 carry that hint."""
    sig, consts, attrs = {}, {}, {}
    free = set(getattr(call.kernel, "do_not_specialize", []))
    for i, (name, value) in enumerate(zip(call.names, call.args)):
        if name in free or i in free:
            sig[name] = type_of(value)
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value == 1:
            sig[name] = "constexpr"
            consts[(i,)] = 1
            continue
        sig[name] = type_of(value)
        if isinstance(value, torch.Tensor) or (
                isinstance(value, int) and not isinstance(value, bool) and value % 16 == 0):
            attrs[(i,)] = [["tt.divisibility", 16]]
    for name, value in call.constexprs().items():
        sig[name] = "constexpr"
        consts[(call.names.index(name),)] = value
    return sig, consts, attrs


def record(vocab: int, verify: bool, dtype: torch.dtype) -> list[Call]:
    with recording() as launches:
        rows, k1 = 4, (5 if verify else 1)
        logits = torch.randn(rows, k1, vocab).to(dtype)
        drafts = logits[:, : k1 - 1].argmax(-1)
        tri._run(logits, drafts, make_batch(rows, vocab, k1, "cpu"), None, None)
    return [(c.name, c.kernel, *signature(c), c.options) for c in launches]


def _cuobjdump(cubin: bytes, flag: str) -> str:
    import subprocess
    import tempfile

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([str(tool), flag, f.name], capture_output=True, text=True).stdout


def _sass(cubin: bytes) -> str:
    return _cuobjdump(cubin, "-sass")


def _resources(cubin: bytes) -> str:
    """Registers and spill stores from cuobjdump's resource usage of the cubin."""
    out = _cuobjdump(cubin, "--dump-resource-usage")
    regs = re.search(r"REG:(\d+)", out)
    stack = re.search(r"STACK:(\d+)", out)
    return f"regs {regs.group(1) if regs else '?'}, stack {stack.group(1) if stack else '?'}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=262144)
    ap.add_argument("--verify", action="store_true")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--mix", default="issue", choices=MIXES, help="the rows (bench/sampler.py)")
    ap.add_argument("--kernel", default="_tile_kernel")
    ap.add_argument("--sass", action="store_true", help="print the SASS too")
    ap.add_argument("--path", default=None, metavar="ADDR,..",
                    help="with --stop: count the instructions on the path that takes the "
                         "branches at these hex addresses (see path_length)")
    ap.add_argument("--stop", default=None, metavar="ADDR")
    ap.add_argument("--dump", default=None, metavar="DIR",
                    help="write each kernel's TTGIR and PTX to DIR/<kernel>.{ttgir,ptx}")
    args = ap.parse_args()
    MIX[0] = args.mix
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    for name, kernel, sig, consts, attrs, options in record(args.vocab, args.verify, dtype):
        if args.kernel not in ("all", name):
            continue
        ck = triton.compile(ASTSource(kernel, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                            options=options)
        sass = _sass(ck.asm["cubin"])
        ops = [m.group(1) for m in re.finditer(OP, sass)]
        counts = collections.Counter()
        for op in ops:
            for cls, pat in CLASSES.items():
                if re.match(pat, op):
                    counts[cls] += 1
                    break
            else:
                counts["other"] += 1
        mix = " ".join(f"{c} {n}" for c, n in sorted(counts.items()))
        print(f"{name}: {len(ops)} SASS instructions, {_resources(ck.asm['cubin'])}, "
              f"shared {ck.metadata.shared} B | {mix}")
        if args.stop is not None:
            taken = {int(a, 16) for a in (args.path or "").split(",") if a}
            print(f"{name}: path to {args.stop}: "
                  f"{path_length(sass, taken, int(args.stop, 16))} instructions")
        if args.sass:
            print(sass)
        if args.dump:
            for ext in ("ttgir", "ptx"):
                (Path(args.dump) / f"{name}.{ext}").write_text(ck.asm[ext])


if __name__ == "__main__":
    main()
