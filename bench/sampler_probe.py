"""Where the Triton sampler's time goes (GPU): the tile kernel alone under variants (all
features / no candidates / no patch+grammar / bare stats), the whole `sample` for batches
whose rows all take one path, compile statistics (registers, spills, shared memory), for
the benchmark workload which row kinds take the slow path, and (part "kinds") each
kernel's time for batches of one row kind. Measurement only.

    python bench/sampler_probe.py [tile,path,slow,warps,kinds,stamps]"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[0] = str(Path(__file__).resolve().parents[1])
from bench.sampler import K, make_batch, timed  # noqa: E402
from sampler import SamplingBatch, SamplingParams  # noqa: E402
from sampler import triton_backend as tri  # noqa: E402
from sampler import triton_kernels as tk  # noqa: E402


def tile_variants(rows: int, vocab: int, bw: float) -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(rows, vocab, device="cuda", generator=g) * 8
    batch = make_batch(rows, vocab, 1, "cuda")
    head = batch.head(rows)
    bv = tri.block_v(vocab)
    tiles = -(-vocab // bv)
    t_pad = tk.next_pow2(tiles)
    c = tri.slots(tiles)
    words = (vocab + 31) // 32
    n = rows
    f32 = dict(dtype=torch.float32, device="cuda")
    bits = torch.zeros(n, words, dtype=torch.int32, device="cuda")
    pval = torch.zeros(n, vocab, **f32)
    gm = head.grammar_bitmask
    out = [torch.empty(n, t_pad, **f32), torch.empty(n, t_pad, **f32),
           torch.empty(n, t_pad, dtype=torch.int32, device="cuda"),
           torch.empty(n, t_pad, dtype=torch.int32, device="cuda"), torch.empty(n, t_pad, **f32),
           torch.empty(n, t_pad, c, **f32),
           torch.empty(n, t_pad, c, dtype=torch.int32, device="cuda")]
    floor = rows * vocab * 4 / bw * 1e6
    thr = torch.empty(n, **f32)
    tick = torch.zeros(n, dtype=torch.int32, device="cuda")
    none = torch.empty(rows, 0, dtype=torch.int64, device="cuda")
    tri._pre(logits[:, None], none, None, head, bits, False, tick, thr)  # the thresholds
    us_pre = timed(lambda: tri._pre(logits[:, None], none, None, head, bits, False, tick, thr),
                   "cuda", 30)  # (the last part of each row zeroes its ticket again)
    print(f"thresholds B={rows} V={vocab}: {us_pre:8.1f} us", flush=True)
    for name, cand, patch, gram, probe in (
            ("all", True, True, True, 0), ("no-cand", False, True, True, 0),
            ("cand-only", True, False, False, 0), ("cand-nostore", True, False, False, 1),
            ("stats-only", False, False, False, 0)):
        def launch(cand=cand, patch=patch, gram=gram, probe=probe):
            return tk._tile_kernel[(n, 1, tiles)](
                logits, logits.stride(0), vocab, 1, head.temperature, head.row_flags, gm,
                gm.stride(0), gm.stride(1), bits, pval, words, thr, *out,
                T_PAD=t_pad, C=c, BLOCK_V=bv,
                HAS_GRAMMAR=gram, HAS_PATCH=patch, HAS_CAND=cand, PROBE=probe,
                **tri.kernel_options("_tile_kernel", block=bv, vocab=vocab))
        kern = launch()
        us = timed(launch, "cuda", 30)
        print(f"tile B={rows} V={vocab} {name:>14}: {us:8.1f} us = {us / floor:5.1f}x floor "
              f"regs={kern.n_regs} spills={kern.n_spills} smem={kern.metadata.shared}",
              flush=True)


def one_path(rows: int, vocab: int, bw: float) -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(rows, vocab, device="cuda", generator=g) * 8
    floor = rows * vocab * 4 / bw * 1e6
    for name, p in (("temp", SamplingParams(temperature=0.9)),
                    ("top-p", SamplingParams(temperature=0.7, top_p=0.9)),
                    ("top-k", SamplingParams(temperature=0.8, top_k=50)),
                    ("greedy", SamplingParams(temperature=0))):
        batch = SamplingBatch.from_requests([p] * rows, [[]] * rows, [[]] * rows, vocab,
                                            device="cuda", seeds=list(range(rows)))
        us = timed(lambda b=batch: tri.sample(logits, b), "cuda", 30)
        none = torch.empty(rows, 0, dtype=torch.int64, device="cuda")
        path = tri._run(logits[:, None], none, batch, None, None).path
        print(f"sample B={rows} V={vocab} all {name:>6}: {us:8.1f} us = {us / floor:5.1f}x floor"
              f" paths={torch.bincount(path.long(), minlength=4).tolist()}", flush=True)


def slow_kinds(rows: int, vocab: int) -> None:
    g = torch.Generator(device="cuda").manual_seed(1)
    logits = torch.randn(rows, K + 1, vocab, device="cuda", generator=g) * 8
    drafts = logits[:, :K].argmax(-1)
    vb = make_batch(rows, vocab, K + 1, "cuda")
    path = tri._run(logits, drafts, vb, None, None).path.view(rows, K + 1).cpu()
    slow = [(r, (r + 4) % 5, j) for r in range(rows) for j in range(K + 1) if path[r, j] == 3]
    print(f"slow verify rows B={rows} V={vocab} (row, kind, j): {slow[:24]}", flush=True)


def finish_warps(vocab: int) -> None:
    """`sample` and `verify` of the benchmark workload at B = 1 and 64 under finish-kernel
    warp counts (the row stage's latency)."""
    g = torch.Generator(device="cuda").manual_seed(1)
    for rows in (1, 64):
        logits = torch.randn(rows, K + 1, vocab, device="cuda", generator=g) * 8
        drafts = logits[:, :K].argmax(-1)
        sb, vb = make_batch(rows, vocab, 1, "cuda"), make_batch(rows, vocab, K + 1, "cuda")
        first = logits[:, 0].contiguous()
        saved = tri.FINISH_WARPS
        for warps in (4, 8):
            tri.FINISH_WARPS = warps
            us_s = timed(lambda f=first, b=sb: tri.sample(f, b), "cuda", 30)
            us_v = timed(lambda x=logits, d=drafts, b=vb: tri.verify(x, d, b), "cuda", 30)
            print(f"finish warps={warps} B={rows} V={vocab}: sample {us_s:7.1f} us, "
                  f"verify {us_v:7.1f} us", flush=True)
        tri.FINISH_WARPS = saved


def finish_kinds() -> None:
    """Device time of each kernel of `sample` (torch.profiler, eager) for batches whose rows
    are all of one kind, at B = 1 and 64: which filters the row stage's time goes to (its
    sorts: top-k and top-p one value sort, and the candidates' id sort when a tile took
    slots from its atomic counter)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    kinds = {"greedy": SamplingParams(temperature=0), "temp": SamplingParams(temperature=0.9),
             "min-p": SamplingParams(min_p=0.05), "top-k": SamplingParams(top_k=50),
             "top-p": SamplingParams(top_p=0.9),
             "top-k+p": SamplingParams(top_k=40, top_p=0.95)}
    g = torch.Generator(device="cuda").manual_seed(2)
    for vocab in (128256, 262144):
        for rows in (1, 64):
            logits = torch.randn(rows, vocab, device="cuda", generator=g) * 8
            for name, p in kinds.items():
                batch = SamplingBatch.from_requests([p] * rows, [[]] * rows, [[]] * rows, vocab,
                                                    device="cuda", seeds=list(range(rows)))
                for _ in range(3):
                    tri.sample(logits, batch)
                torch.cuda.synchronize()
                with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        tri.sample(logits, batch)
                    torch.cuda.synchronize()
                per: dict[str, float] = {}
                for ev in prof.events():
                    if ev.device_type == torch.autograd.DeviceType.CUDA:
                        per[ev.name[:16]] = per.get(ev.name[:16], 0.0) + ev.device_time / 10
                parts = ", ".join(f"{k} {v:.1f}" for k, v in sorted(per.items()))
                print(f"finish kinds B={rows} V={vocab} {name:>8}: {parts}", flush=True)


# (slot, name) in execution order: each stage's cycles are its reading minus the previous one
STAGES = ((0, "wait"), (1, "settings"), (2, "stats"), (3, "cand"), (8, "raise"), (9, "scan"),
          (4, "store+reload"), (5, "id-sort"), (6, "resolve"), (7, "end"))


def finish_stamps() -> None:
    """The finish kernel's stages in SM cycles (clock64 when each stage's result is known,
    tri.FINISH_STAMP; a stage that waits on a vector adds one reduction to the reading),
    medians over rows and 20 eager calls, for `sample` and `verify` (K = 4, argmax drafts)
    batches of one filtered kind at B = 1 and 64; and how many rows had more than CMAX
    candidates above the tiles' bound (those whose bound the finish raises)."""
    kinds = {"min-p": SamplingParams(min_p=0.05), "top-k": SamplingParams(top_k=50),
             "top-k+p": SamplingParams(top_k=40, top_p=0.95)}
    g = torch.Generator(device="cuda").manual_seed(2)
    tri.FINISH_STAMP = True
    slots = [i for i, _ in STAGES]
    for vocab in (32000, 128256, 262144):
        for rows in (1, 64):
            logits = torch.randn(rows, K + 1, vocab, device="cuda", generator=g) * 8
            drafts = logits[:, :K].argmax(-1)
            none = torch.empty(rows, 0, dtype=torch.int64, device="cuda")
            for name, p in kinds.items():
                for mode in ("sample", "verify"):
                    k1 = 1 if mode == "sample" else K + 1
                    batch = SamplingBatch.from_requests(
                        [p] * rows, [[]] * rows, [[]] * rows, vocab, device="cuda",
                        num_positions=k1, seeds=list(range(rows)))
                    x = logits[:, :1] if mode == "sample" else logits
                    d = none if mode == "sample" else drafts
                    runs = []
                    for it in range(23):
                        raw = tri._run(x, d, batch, None, None)
                        if it >= 3:
                            runs.append(raw.stamps.clone())
                    st = torch.cat(runs)
                    raised = (st[:, tk.STAMP_COUNT.value] > tri.CMAX).double().mean().item()
                    count = st[:, tk.STAMP_COUNT.value].double().median().item()
                    clk = st[:, slots].double()
                    dt = (clk[:, 1:] - clk[:, :-1]).median(0).values.tolist()
                    parts = " ".join(f"{n}+{c:.0f}" for (_, n), c in zip(STAGES[1:], dt))
                    print(f"finish stamps {mode} B={rows} V={vocab} {name:>8} (cycles): {parts}"
                          f" | total {(clk[:, -1] - clk[:, 0]).median().item():.0f} | count "
                          f"{count:.0f}, raised {raised:.0%}", flush=True)
    tri.FINISH_STAMP = False


def main() -> None:
    src = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    bw = 2 * src.numel() / (timed(lambda: dst.copy_(src), "cuda", 10) * 1e-6)
    print(f"copy {bw / 1e9:.0f} GB/s, C={tri.slots(16)}/{tri.slots(128)} "
          f"BLOCK_V={tri.block_v(32000)} warps={tri.tile_warps(tri.block_v(32000))}")
    parts = sys.argv[1].split(",") if len(sys.argv) > 1 else ["tile", "path", "slow"]
    if "kinds" in parts:
        finish_kinds()
    if "stamps" in parts:
        finish_stamps()
    for vocab in (32000, 262144):
        if "tile" in parts:
            tile_variants(256, vocab, bw)
        if "path" in parts:
            one_path(256, vocab, bw)
        if "slow" in parts:
            slow_kinds(64, vocab)
        if "warps" in parts:
            finish_warps(vocab)


if __name__ == "__main__":
    main()
