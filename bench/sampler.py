"""Time `sample` and `verify` (K=4) per call for heterogeneous batches.

    python bench/sampler.py --device cpu --backend torch
    python bench/sampler.py --device cuda --backend torch   # CUDA-graph replays

Workload: rows cycle through greedy, top-k/top-p/min-p mixes, penalties over 512 history
tokens, a logit-bias entry, a grammar bitmask on a quarter of rows. The floor is one read of
the logits (B·V·4 bytes for sample, B·(K+1)·V·4 for verify) at the device's copy bandwidth,
measured in the same run. Prints a table and writes JSON to bench/results/sampler-<device>.json.
`--mix temperature` times rows of temperature 0.7 alone instead (the commonest request: no
filter, penalty or grammar), `--mix filters / penalties / grammar` one of the issue's features
at a time, for comparison; the issue's targets are for the default mix.

With --baselines (CUDA): the graphed torch backend, FlashInfer `top_k_top_p_sampling_from_logits`
(sample) and `torch.softmax` + `chain_speculative_sampling` (verify, dense draft probs), and
`torch.topk(k=50)` and `torch.amax` over the same logits (one kernel reading them once: the
cost of a single graphed kernel at that size), and `bench/read_ref.py`'s two-stage read of the
issue's design with nothing else (tile maxima and sums, then the rows' merge: `read2`; the
first stage alone: `read1`), all as CUDA-graph replay medians in the same run; a baseline
that cannot be imported or captured is reported as null. Also writes a PNG (us vs B, one
panel per V).

`--table RESULT.json [--against OTHER.json]` prints a saved run's table as markdown instead,
with FlashInfer's times beside ours (the closing note's form), and our largest change
against another run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import torch

# Run as a script, this file's folder comes first on sys.path and its name would shadow the
# `sampler` package: put the repository root there instead.
sys.path[0] = str(Path(__file__).resolve().parents[1])
from bench.read_ref import read_stats  # noqa: E402
from sampler import Sampler, SamplingBatch, SamplingParams  # noqa: E402

K = 4
SCALE = [3.0]  # logits = randn * SCALE (3: flat, high entropy; 8: peaked, LLM-like top mass)
RESULTS = Path(__file__).parent / "results"
# The rows: "issue", the heterogeneous mix; the others take one of its features at a
# time, to see what each costs: "temperature" (0.7 alone: the commonest request), "filters"
# (the top-k / top-p / min-p rows without penalties), "penalties" (its penalties and
# bias at temperature 0.7), "grammar" (temperature 0.7, the grammar on a quarter).
MIXES = ("issue", "temperature", "filters", "penalties", "grammar")
MIX = ["issue"]
FLUSH = ["write"]  # how `timed` evicts the L2 before each replay (`evict_l2`)


def workload_params(rows: int, vocab: int) -> list[SamplingParams]:
    if MIX[0] in ("temperature", "grammar"):
        return [SamplingParams(temperature=0.7) for _ in range(rows)]
    kinds = [
        SamplingParams(temperature=0),
        SamplingParams(temperature=0.8, top_k=50),
        SamplingParams(temperature=0.7, top_p=0.9),
        SamplingParams(temperature=1.0, min_p=0.05, repetition_penalty=1.1),
        SamplingParams(top_k=40, top_p=0.95, frequency_penalty=0.3, presence_penalty=0.2,
                       logit_bias={vocab - 1: 5.0}),
    ]
    if MIX[0] == "filters":  # the filtered kinds without their penalties and bias
        kinds = [replace(p, repetition_penalty=1.0, frequency_penalty=0.0,
                         presence_penalty=0.0, logit_bias=None) for p in kinds[1:]]
        return [kinds[r % len(kinds)] for r in range(rows)]
    if MIX[0] == "penalties":  # the penalised kinds at temperature 0.7 without filters
        kinds = [replace(p, temperature=0.7, top_k=0, top_p=1.0, min_p=0.0) for p in kinds[3:]]
        return [kinds[r % len(kinds)] for r in range(rows)]
    # row 0 is the all-features kind, so B = 1 measures it rather than a greedy row (run 4's
    # B = 1 figures in NOTES-sampler.md were for the greedy row)
    return [kinds[(r + len(kinds) - 1) % len(kinds)] for r in range(rows)]


def make_batch(rows: int, vocab: int, positions: int, device: str) -> SamplingBatch:
    g = torch.Generator().manual_seed(0)
    hist = torch.randint(0, vocab, (rows, 512), generator=g).tolist()
    mask = torch.full((rows, positions, (vocab + 31) // 32), -1, dtype=torch.int32)
    mask[::4, :, : mask.shape[2] // 2] = 0  # a quarter of rows: half the vocab forbidden
    return SamplingBatch.from_requests(workload_params(rows, vocab), [h[:256] for h in hist],
                                       [h[256:] for h in hist], vocab, device=device,
                                       seeds=list(range(rows)), num_positions=positions,
                                       grammar_bitmask=mask if MIX[0] in ("issue", "grammar")
                                       else None)


def graphed(fn: Callable[[], object]) -> torch.cuda.CUDAGraph:
    """fn captured in a CUDA graph (after three warm-up calls on a side stream), replayed
    once."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    return graph


def case_inputs(rows: int, vocab: int, device: str, scale: float | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, SamplingBatch,
                           SamplingBatch]:
    """One size's inputs: logits [rows, K + 1, vocab] = randn * scale (default SCALE[0]),
    the drafts (argmax of the first K positions), the first position's logits (sample's
    input) and the sample and verify batches."""
    g = torch.Generator(device=device).manual_seed(1)
    logits = torch.randn(rows, K + 1, vocab, device=device, generator=g) * (
        SCALE[0] if scale is None else scale)
    drafts = logits[:, :K].argmax(-1)
    sample_batch = make_batch(rows, vocab, 1, device)
    verify_batch = make_batch(rows, vocab, K + 1, device)
    return logits, drafts, logits[:, 0].contiguous(), sample_batch, verify_batch


def timed(fn: Callable[[], object], device: str, iters: int) -> float:
    """Median microseconds per call. On CUDA: fn captured in a CUDA graph; each replay is
    timed alone with CUDA events after the L2 cache is evicted (`evict_l2`: inputs come from
    HBM, as the floor assumes; the host's launch latency is not counted)."""
    if device == "cuda":
        graph = graphed(fn)
        times = []
        for _ in range(iters):
            evict_l2()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        return statistics.median(times)
    fn()
    times = []
    for _ in range(iters):
        start_s = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start_s) * 1e6)
    return statistics.median(times)


_FLUSH: list[torch.Tensor] = []


def evict_l2() -> None:
    """Evict the L2 cache before a timed replay. FLUSH[0] "write": a 256 MiB write, which
    leaves the L2 full of dirty lines: the timed call's first reads then also pay their
    write-back to HBM (~50 MB on an H200). "clean": the same write, then a read of another
    256 MiB buffer, so the write-backs happen before the timer starts and the L2 holds clean
    lines of that buffer alone (bench/NOTES-sampler.md, run 118)."""
    if not _FLUSH:
        _FLUSH.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
    _FLUSH[0].fill_(1)
    if FLUSH[0] == "clean":
        if len(_FLUSH) == 1:  # (the read's buffer, made on first use)
            _FLUSH.append(torch.zeros(64 << 20, dtype=torch.int32, device="cuda"))
        torch.amax(_FLUSH[1])


def copy_bandwidth(device: str) -> float:
    """Bytes per second of a large device-to-device copy (read + write counted once each)."""
    src = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    us = timed(lambda: dst.copy_(src), device, 10)
    return 2 * src.numel() / (us * 1e-6)


T = TypeVar("T")


def maybe(fn: Callable[[], T]) -> T | None:
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - a missing or failing baseline is reported as null
        print(f"baseline failed: {type(err).__name__}: {str(err)[:200]}", file=sys.stderr)
        return None


def baselines(rows: int, vocab: int, logits: torch.Tensor, drafts: torch.Tensor,
              sample_batch: SamplingBatch, verify_batch: SamplingBatch, device: str,
              iters: int) -> dict[str, float | None]:
    """Graph-replay medians of the comparison points (us)."""
    ref = Sampler("torch", device)
    first = logits[:, 0].contiguous()
    out: dict[str, float | None] = {
        "torch_sample_us": maybe(lambda: timed(lambda: ref.sample(first, sample_batch),
                                               device, iters)),
        "torch_verify_us": maybe(lambda: timed(lambda: ref.verify(logits, drafts, verify_batch),
                                               device, iters)),
        "topk50_us": maybe(lambda: timed(lambda: torch.topk(first, 50, dim=-1), device, iters)),
        # one read of the same bytes by one reduction kernel, timed the same way: what a
        # graph replay of a single kernel that reads the logits once costs at this size
        "amax_sample_us": maybe(lambda: timed(lambda: torch.amax(first, -1), device, iters)),
        "amax_verify_us": maybe(lambda: timed(lambda: torch.amax(logits, -1), device, iters)),
        # the two-stage design reduced to reading the logits (no feature, no draw)
        "read1_sample_us": maybe(lambda: timed(lambda: read_stats(first, merge=False), device,
                                               iters)),
        "read2_sample_us": maybe(lambda: timed(lambda: read_stats(first), device, iters)),
        "read1_verify_us": maybe(lambda: timed(lambda: read_stats(logits, merge=False), device,
                                               iters)),
        "read2_verify_us": maybe(lambda: timed(lambda: read_stats(logits), device, iters)),
    }
    fi = maybe(lambda: flashinfer_calls(rows, vocab, logits, drafts)) or {}
    for name in ("sample", "verify"):
        out[f"flashinfer_{name}_us"] = (maybe(lambda f=fi[name]: timed(f, device, iters))
                                        if name in fi else None)
    return out


def flashinfer_calls(rows: int, vocab: int, logits: torch.Tensor, drafts: torch.Tensor
                     ) -> dict[str, Callable[[], object]]:
    """FlashInfer's baselines over a case's inputs: "sample", `top_k_top_p_sampling_from_logits`
    on the first position with the workload's top-k / top-p; "verify", `torch.softmax` +
    `chain_speculative_sampling` with dense draft probabilities (raises ImportError without
    FlashInfer)."""
    from flashinfer.sampling import chain_speculative_sampling, top_k_top_p_sampling_from_logits

    params = workload_params(rows, vocab)
    top_k = torch.tensor([p.top_k or vocab for p in params], dtype=torch.int32,
                         device=logits.device)
    top_p = torch.tensor([p.top_p for p in params], device=logits.device)
    first = logits[:, 0].contiguous()
    q = torch.softmax(logits[:, :K].float(), -1)
    d32 = drafts.to(torch.int32)
    return {"sample": lambda: top_k_top_p_sampling_from_logits(first, top_k, top_p),
            "verify": lambda: chain_speculative_sampling(q, d32, torch.softmax(logits, -1))}


def run_case(sampler: Sampler, rows: int, vocab: int, device: str, iters: int,
             bandwidth: float, with_baselines: bool = False) -> dict[str, float | int | None]:
    logits, drafts, first, sample_batch, verify_batch = case_inputs(rows, vocab, device)
    sample_us = timed(lambda: sampler.sample(first, sample_batch), device, iters)
    verify_us = timed(lambda: sampler.verify(logits, drafts, verify_batch), device, iters)
    floor_s = rows * vocab * 4 / bandwidth * 1e6
    row: dict[str, float | int | None] = {
        "B": rows, "V": vocab, "sample_us": sample_us, "verify_us": verify_us,
        "sample_floor_us": floor_s, "verify_floor_us": floor_s * (K + 1)}
    if sampler.backend == "triton":  # rows per path: greedy, candidates, tiles, slow
        from sampler import triton_backend as tri
        none = torch.empty(rows, 0, dtype=torch.int64, device=device)
        for name, path in (("sample", tri._run(first[:, None], none, sample_batch, None,
                                               None).path),
                           ("verify", tri._run(logits, drafts, verify_batch, None, None).path)):
            row[f"{name}_paths"] = torch.bincount(path.long(), minlength=4).tolist()
    if with_baselines:
        row.update(baselines(rows, vocab, logits, drafts, sample_batch, verify_batch, device,
                             iters))
    print(row, file=sys.stderr, flush=True)
    return row


def profile_case(sampler: Sampler, rows: int, vocab: int, iters: int = 10) -> list[str]:
    """Device time per kernel (torch.profiler, eager calls) for sample and verify."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    logits, drafts, first, sample_batch, verify_batch = case_inputs(rows, vocab, "cuda")
    lines = []
    for name, fn in (("sample", lambda: sampler.sample(first, sample_batch)),
                     ("verify", lambda: sampler.verify(logits, drafts, verify_batch))):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(iters):
                fn()
            torch.cuda.synchronize()
        per: dict[str, float] = {}
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                key = ev.name[:40]
                per[key] = per.get(key, 0.0) + ev.device_time / iters
        total = sum(per.values())
        parts = ", ".join(f"{k} {v:.1f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1])
                          if v >= 0.02 * total)
        lines.append(f"{name} B={rows} V={vocab} scale={SCALE[0]:g}: {total:.1f} us = {parts}")
        print(lines[-1], flush=True)
    return lines


def ratio(num: object, den: object) -> str:
    if not isinstance(num, float | int) or not isinstance(den, float | int) or not den:
        return "-"
    return f"{num / den:.1f}"


def print_baseline_table(rows: list[dict]) -> None:
    print(f"{'B':>4} {'V':>7} | {'sample':>7} {'xfl':>5} {'torch/':>6} {'FI/':>5} "
          f"{'topk':>6} {'amax':>6} {'read2':>6} | {'verify':>7} {'xfl':>5} {'torch/':>6} "
          f"{'FI/':>5} {'amax':>6} {'read2':>6}")
    for r in rows:
        print(f"{r['B']:>4} {r['V']:>7} | {r['sample_us']:>7.1f} "
              f"{ratio(r['sample_us'], r['sample_floor_us']):>5} "
              f"{ratio(r.get('torch_sample_us'), r['sample_us']):>6} "
              f"{ratio(r.get('flashinfer_sample_us'), r['sample_us']):>5} "
              f"{r.get('topk50_us') or 0:>6.1f} {r.get('amax_sample_us') or 0:>6.1f} "
              f"{r.get('read2_sample_us') or 0:>6.1f} | "
              f"{r['verify_us']:>7.1f} "
              f"{ratio(r['verify_us'], r['verify_floor_us']):>5} "
              f"{ratio(r.get('torch_verify_us'), r['verify_us']):>6} "
              f"{ratio(r.get('flashinfer_verify_us'), r['verify_us']):>5} "
              f"{r.get('amax_verify_us') or 0:>6.1f} {r.get('read2_verify_us') or 0:>6.1f}")
    print("xfl = x floor; torch/ and FI/ = speed-up over that baseline (baseline us / ours); "
          "topk = torch.topk(k=50), amax = torch.amax over the same logits (one kernel, one "
          "read), read2 = the two-stage read alone (bench/read_ref.py: tile max and sum, row "
          "merge), us")


def print_item9_table(rows: list[dict], base: list[dict] | None = None) -> None:
    """The closing note's table for a saved run (`--table`): ours, FlashInfer's call and
    chain, the speed-up over each and x floor, as markdown; the speed-up range over the graphed
    torch backend; with `base` (another run's rows, `--against`), our largest change."""
    print("| B | V | sample | FI | x FI | x floor | verify | FI chain | x FI | x floor |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        cells = [r["B"], r["V"]]
        for op, fi in (("sample", "flashinfer_sample_us"), ("verify", "flashinfer_verify_us")):
            us = r[f"{op}_us"]
            cells += [f"{us:.1f}", f"{r[fi]:.1f}" if r.get(fi) else "-",
                      f"{r[fi] / us:.2f}" if r.get(fi) else "-",
                      f"{us / r[f'{op}_floor_us']:.3g}"]
        print("| " + " | ".join(map(str, cells)) + " |")
    for op in ("sample", "verify"):
        ups = [r[f"torch_{op}_us"] / r[f"{op}_us"] for r in rows if r.get(f"torch_{op}_us")]
        if ups:
            print(f"{op}: {min(ups):.0f}-{max(ups):.0f}x the graphed torch backend")
    if base:
        old = {(r["B"], r["V"]): r for r in base}
        change = [(abs(r[f"{op}_us"] - old[r["B"], r["V"]][f"{op}_us"]), op, r["B"], r["V"])
                  for r in rows if (r["B"], r["V"]) in old for op in ("sample", "verify")]
        if not change:
            print("no (B, V) in common with the base run")
            return
        us, op, b, v = max(change)
        print(f"largest change against the base run: {us:.2f} us ({op} B = {b}, V = {v})")


def plot(rows: list[dict], path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    vocabs = sorted({r["V"] for r in rows})
    fig, axes = plt.subplots(1, len(vocabs), figsize=(5 * len(vocabs), 4), squeeze=False)
    keys = ["sample_us", "verify_us", "sample_floor_us", "verify_floor_us", "torch_sample_us",
            "torch_verify_us", "flashinfer_sample_us", "flashinfer_verify_us", "topk50_us",
            "amax_sample_us", "amax_verify_us", "read2_sample_us", "read2_verify_us"]
    for ax, v in zip(axes[0], vocabs):
        sel = [r for r in rows if r["V"] == v]
        for key in keys:
            pts = [(r["B"], r[key]) for r in sel if r.get(key)]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=key.replace("_us", ""))
        ax.set(xscale="log", yscale="log", xlabel="B", ylabel="us", title=f"V={v}")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--backend", default="torch", choices=["torch", "triton", "auto"])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--vocab", type=int, nargs="+", default=[32000, 128256])
    ap.add_argument("--iters", type=int, default=0, help="timed calls (default: 5 CPU, 50 GPU)")
    ap.add_argument("--baselines", action="store_true", help="also time the baselines (CUDA)")
    ap.add_argument("--out", default=str(RESULTS), help="folder for JSON/PNG")
    ap.add_argument("--scale", type=float, default=3.0, help="logits = randn * scale")
    ap.add_argument("--profile", action="store_true", help="device time per kernel (CUDA)")
    ap.add_argument("--mix", default="issue", choices=MIXES,
                    help="rows: the issue's mix of every feature (default), or one feature "
                         "alone (see MIXES)")
    ap.add_argument("--flush", default=FLUSH[0], choices=["write", "clean"],
                    help="how the L2 is evicted before each timed replay (see evict_l2)")
    ap.add_argument("--table", metavar="JSON",
                    help="print a saved run's table as markdown (item 9's columns), time nothing")
    ap.add_argument("--against", metavar="JSON", help="with --table: the run to compare with")
    args = ap.parse_args()
    if args.table:
        print_item9_table(json.loads(Path(args.table).read_text())["rows"],
                          args.against and json.loads(Path(args.against).read_text())["rows"])
        return
    SCALE[0] = args.scale
    MIX[0] = args.mix
    FLUSH[0] = args.flush
    if args.profile:
        prof_sampler = Sampler(args.backend, args.device)
        for v in args.vocab:
            for b in args.batch:
                profile_case(prof_sampler, b, v)
        return
    iters = args.iters or (5 if args.device == "cpu" else 50)
    sampler = Sampler(args.backend, args.device)
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    bandwidth = copy_bandwidth(args.device)
    rows = [run_case(sampler, b, v, args.device, iters, bandwidth, args.baselines)
            for v in args.vocab for b in args.batch]
    print(f"device={name} backend={sampler.backend} copy={bandwidth / 1e9:.1f} GB/s K={K}")
    print(f"{'B':>4} {'V':>7} {'sample us':>11} {'x floor':>8} {'verify us':>11} {'x floor':>8}")
    for r in rows:
        print(f"{r['B']:>4} {r['V']:>7} {r['sample_us']:>11.0f} "
              f"{r['sample_us'] / r['sample_floor_us']:>8.1f} {r['verify_us']:>11.0f} "
              f"{r['verify_us'] / r['verify_floor_us']:>8.1f}")
    if args.baselines:
        print_baseline_table(rows)
    results = Path(args.out)
    results.mkdir(parents=True, exist_ok=True)
    tag = ("" if args.scale == 3.0 else f"-scale{args.scale:g}") + (
        "" if args.mix == "issue" else f"-{args.mix}")
    out = results / f"sampler-{name.replace(' ', '_')}-{sampler.backend}{tag}.json"
    if args.baselines:
        plot(rows, out.with_suffix(".png"))
    out.write_text(json.dumps({"device": name, "backend": sampler.backend, "K": K,
                               "logit_scale": args.scale,
                               "copy_bytes_per_s": bandwidth, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
