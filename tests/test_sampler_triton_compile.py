"""The Triton kernels compile for the GPU (sm_90, Hopper) on a machine without one.

The CPU interpreter runs the kernels' semantics but not Triton's compiler, which rejects
programs the interpreter accepts (a loop-carried variable changing type, a shift on a
float dummy pointer): both reached the GPU machine once. This test records the launches
`triton_backend` makes for real batches (sample and verify, every draft-law mode, with and
without filters, penalties and grammar; fp32 and bf16 logits), then compiles each recorded
(kernel, argument types, constexprs) with `triton.compile` for sm_90, frontend through
ptxas. Run in a subprocess so TRITON_INTERPRET stays unset there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def record_and_compile() -> list[str]:
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from bench.kernel_isa import recording, type_of
    from sampler import SamplingBatch, SamplingParams
    from sampler import triton_backend as tri
    from tests.test_sampler_triton import make_batch

    with recording() as launches:
        vocab, k = 1000, 3
        g = torch.Generator().manual_seed(0)
        greedy = SamplingBatch.from_requests([SamplingParams(temperature=0)] * 2, [[]] * 2,
                                             [[]] * 2, vocab)
        nd = torch.tensor([k, 1, 0, k, k, 2, k, k])
        for dtype in (torch.float32, torch.bfloat16):
            logits = (torch.randn(8, k + 1, vocab, generator=g) * 4).to(dtype)
            drafts = logits[:, :k].argmax(-1)
            tri._run(logits[:, :1], drafts[:, :0], make_batch(vocab, 1, 1), None, None)
            tri._run(logits, drafts, make_batch(vocab, k + 1, 2), None, nd)
            if dtype == torch.bfloat16:
                continue
            tri._run(logits[:2, :1], drafts[:2, :0], greedy, None, None)
            tri._run(logits[:2], drafts[:2], greedy, None, None)
            q = torch.softmax(torch.randn(8, k, vocab, generator=g), -1)
            sparse = (torch.randint(0, vocab, (8, k, 4), generator=g), torch.rand(8, k, 4))
            tri._run(logits, drafts, make_batch(vocab, k + 1, 2), None, None)
            tri._run(logits, drafts, make_batch(vocab, k + 1, 2), q, nd)
            tri._run(logits, drafts, make_batch(vocab, k + 1, 2), sparse, nd)
    # each distinct (kernel, argument types, constexprs) once, without the JIT's value
    # specialisations
    calls: dict[tuple, tuple] = {}
    for c in launches:
        sig = {name: type_of(value) for name, value in zip(c.names, c.args)}
        consts = {}
        for name, value in c.constexprs().items():
            sig[name] = "constexpr"
            consts[(c.names.index(name),)] = value
        key = (c.name, tuple(sig.items()), tuple(sorted(consts.items())))
        calls[key] = (c.kernel, sig, consts, c.options)
    target = GPUTarget("cuda", 90, 32)
    done = []
    for (name, _, _), (kernel, sig, consts, options) in calls.items():
        triton.compile(ASTSource(kernel, sig, consts), target=target, options=options)
        done.append(name)
    return done


def test_every_launch_compiles_for_sm90(tmp_path: Path) -> None:
    """Property: each (kernel, argument types, constexprs) the backend launches for the
    recorded batches compiles for an H100/H200 (the four kernels, both logit dtypes)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    env["TRITON_CACHE_DIR"] = str(tmp_path)  # compile for real, not from an earlier cache
    proc = subprocess.run([sys.executable, __file__], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    done = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"_pre_kernel", "_tile_kernel", "_finish_kernel", "_combine_kernel"} <= set(done)
    assert len(done) >= 10, done


@pytest.mark.parametrize(("knob", "value", "kernel"), [
    ("SONICSPEC_ASM_STORE", "0", "_tile_kernel"),  # tl.store row stores
    ("SONICSPEC_ASM_SCATTER", "0", "_finish_kernel"),  # tl.store of the compaction
    ("SONICSPEC_LEVEL_RAISE", "0", "_finish_kernel"),  # the histogram raise alone
    ("SONICSPEC_PICK_FUSED", "0", "_finish_kernel"),  # the draw by positions
    ("SONICSPEC_X_EVICT", "", "_tile_kernel"),  # the logits' default cache policy
    ("SONICSPEC_BLOCK_V", "2048", "_tile_kernel"),  # the tiles (4 warps) of V > 131072
    ("SONICSPEC_SUM_AT_MAX", "0", "_tile_kernel"),  # per-row sums scaled to the tile max
    ("SONICSPEC_ARG_GREEDY", "0", "_tile_kernel"),  # the tile argmax in every row
    ("SONICSPEC_TILE_SCAN", "0", "_tile_kernel"),  # the atomic counter in tiles of 1024
    ("SONICSPEC_TILE_SCAN", "2", "_tile_kernel"),  # the ranked stores out of line
    ("SONICSPEC_FINISH_EARLY", "0", "_finish_kernel"),  # settings after the wait
])
def test_measurement_variants_compile_for_sm90(tmp_path: Path, knob: str, value: str,
                                               kernel: str) -> None:
    """The kernels' measurement variants, and the tiles of 2048 that vocabularies above
    131072 use (the test above compiles the defaults at V = 1000), compile for sm_90."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=str(ROOT), TRITON_CACHE_DIR=str(tmp_path), **{knob: value})
    proc = subprocess.run([sys.executable, "bench/kernel_isa.py", "--kernel", kernel,
                           "--vocab", "32000"], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"{kernel}:" in proc.stdout, proc.stdout


def test_ticket_buffers_outlive_larger_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The threshold tickets live in a buffer per device that outlives the calls (no memset
    per call). A larger batch takes a larger buffer; the smaller one must stay allocated,
    since a CUDA graph captured with it still increments and zeroes its tickets on every
    replay (freed, its memory would go to other tensors)."""
    import gc
    import weakref

    import torch

    from sampler import triton_backend as tri

    monkeypatch.setattr(tri, "_TICKETS", {})  # (no buffer from an earlier test)
    dev = torch.device("cpu")
    small = tri._tickets(8, dev)
    assert small.numel() >= 8 and not bool(small.any())
    assert tri._tickets(8, dev) is small  # reused while it is large enough
    ref = weakref.ref(small)
    del small
    large = tri._tickets(1 << 16, dev)
    gc.collect()
    assert ref() is not None and ref() is not large
    assert large.numel() >= 1 << 16 and tri._tickets(100, dev) is large


def test_pre_scratch_lives_for_the_whole_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pre kernel's group maxima scratch comes from `_run`, which keeps it for the whole
    call: with PDL the tile kernel's programs start while the pre kernel's last ones still
    use it, and scratch freed when `_pre` returned would go to the tile kernel's outputs
    (run 103: a tile kernel that did not wait for the whole pre grid overwrote it, and the
    thresholds were wrong). `_pre` is stopped before its launch; no kernel runs."""
    import torch

    from sampler import triton_backend as tri
    from tests.test_sampler_triton import make_batch

    seen = []

    def record(*args, **kwargs):
        seen.append(args[8] if len(args) > 8 else kwargs.get("gmax"))
        raise RuntimeError("stop")

    monkeypatch.setattr(tri, "_pre", record)
    vocab, k1 = 1000, 3
    logits = torch.randn(8, k1, vocab)
    with pytest.raises(RuntimeError, match="stop"):
        tri._run(logits, logits[:, :-1].argmax(-1), make_batch(vocab, k1, 1), None, None)
    assert isinstance(seen[0], torch.Tensor) and seen[0].shape == (8 * k1, 64)


def test_chunk_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of requests: by default halves above V = 131072 whose start keeps the batch's
    alignment (CHUNK_ALIGN requests), one chunk otherwise; SONICSPEC_CHUNKS's sizes in order,
    the last repeated. A batch slice is views of the batch's rows."""
    import torch

    from sampler import triton_backend as tri
    from tests.test_sampler_triton import make_batch

    monkeypatch.setattr(tri, "CHUNKS", None)
    monkeypatch.setattr(tri, "CHUNK_ALIGN", 16)
    assert tri.chunk_bounds(256, 262144) == [(0, 128), (128, 256)]
    assert tri.chunk_bounds(100, 262144) == [(0, 48), (48, 100)]
    assert tri.chunk_bounds(31, 262144) == [(0, 31)]
    assert tri.chunk_bounds(256, 128256) == [(0, 256)]
    monkeypatch.setattr(tri, "CHUNKS", "32,64")
    assert tri.chunk_bounds(200, 1000) == [(0, 32), (32, 96), (96, 160), (160, 200)]
    monkeypatch.setattr(tri, "CHUNKS", "40")  # (rounded down to the alignment)
    assert tri.chunk_bounds(40, 1000) == [(0, 32), (32, 40)]
    monkeypatch.setattr(tri, "CHUNKS", "0")
    assert tri.chunk_bounds(256, 262144) == [(0, 256)]
    # the pre kernels' streams: one each from CHUNK_PRE_STREAMS_MIN_ROWS rows a chunk
    monkeypatch.setattr(tri, "CHUNK_PRE_STREAMS", "auto")
    assert not tri.pre_streams(32) and tri.pre_streams(128) and tri.pre_streams(640)
    monkeypatch.setattr(tri, "CHUNK_PRE_STREAMS", "0")
    assert not tri.pre_streams(640)
    monkeypatch.setattr(tri, "CHUNK_PRE_STREAMS", "1")
    assert tri.pre_streams(32)
    batch = make_batch(1000, 2, 1)
    part = batch.rows(2, 5)
    assert part.num_rows == 3 and part.grammar_bitmask is not None
    assert part.hist_ids.data_ptr() == batch.hist_ids[2].data_ptr()
    assert torch.equal(part.grammar_bitmask, batch.grammar_bitmask[2:5])
    with pytest.raises(ValueError, match="outside"):
        batch.rows(5, 9)


def test_sass_path_length_follows_the_taken_branches() -> None:
    """bench/sass_path.path_length (how bench/NOTES-sampler.md counts hot paths): it follows
    unconditional branches, conditional ones only when listed, and counts the stop."""
    from bench.sass_path import path_length

    sass = """
        /*0000*/                   MOV R1, R2 ;
        /*0010*/               @P0 BRA 0x40 ;
        /*0020*/                   IADD3 R1, R1, R2, RZ ;
        /*0030*/                   BRA 0x50 ;
        /*0040*/                   FADD R1, R1, R2 ;
        /*0050*/              @!P1 EXIT ;
        /*0060*/                   EXIT ;
    """
    assert path_length(sass, set(), 0x50) == 5  # 0, 10, 20, 30 -> 50
    assert path_length(sass, {0x10}, 0x50) == 4  # 0, 10 -> 40, 50
    assert path_length(sass, {0x10}, 0x60) == 5
    with pytest.raises(KeyError):
        path_length(sass.replace("0x50", "0x70"), set(), 0x60)  # a branch to nowhere


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(json.dumps(record_and_compile()))
