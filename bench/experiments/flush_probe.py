"""How the benchmark's L2 eviction before each replay weighs on what it times (measurement).

`bench/sampler.py` evicts the L2 before every timed graph replay. Its "write" eviction (a
256 MiB fill) leaves the L2 full of dirty lines, so the timed call's reads also pay for
their write-back; "clean" adds a read of another buffer after the fill, so the write-backs
happen before the timer starts (`evict_l2`). Same process, same inputs and graphs, the two
modes interleaved per size: the copy bandwidth (the floor's), our sample and verify, the
one-read references (`read1`, `torch.amax`) and FlashInfer's calls.

    python bench/experiments/flush_probe.py [--batch 1 64 256] [--vocab 32000 262144]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path[0] = str(Path(__file__).resolve().parents[2])
from bench import sampler as bs  # noqa: E402
from bench.read_ref import read_stats  # noqa: E402
from sampler import Sampler  # noqa: E402

MODES = ("write", "clean")


def measure(rows: int, vocab: int, sampler: Sampler, iters: int) -> dict[str, dict]:
    logits, drafts, first, sb, vb = bs.case_inputs(rows, vocab, "cuda")
    calls = {
        "sample": lambda: sampler.sample(first, sb),
        "verify": lambda: sampler.verify(logits, drafts, vb),
        "read1_s": lambda: read_stats(first, merge=False),
        "read1_v": lambda: read_stats(logits, merge=False),
        "amax_s": lambda: torch.amax(first, -1),
    }
    try:
        fi = bs.flashinfer_calls(rows, vocab, logits, drafts)
        calls.update(fi_s=fi["sample"], fi_v=fi["verify"])
    except ImportError as err:
        print(f"no FlashInfer: {err}", file=sys.stderr)
    out: dict[str, dict] = {m: {} for m in MODES}
    for name, fn in calls.items():
        for mode in MODES:
            bs.FLUSH[0] = mode
            out[mode][name] = bs.maybe(lambda f=fn: bs.timed(f, "cuda", iters))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--vocab", type=int, nargs="+", default=[32000, 128256, 262144])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--out", default=None, help="JSON file for the figures")
    args = ap.parse_args()
    bs.SCALE[0] = 8.0
    bw = {}
    for mode in MODES:
        bs.FLUSH[0] = mode
        bw[mode] = bs.copy_bandwidth("cuda")
    print("copy GB/s: " + ", ".join(f"{m} {bw[m] / 1e9:.0f}" for m in MODES), flush=True)
    sampler = Sampler("triton", "cuda")
    rows = []
    for vocab in args.vocab:
        for b in args.batch:
            r = measure(b, vocab, sampler, args.iters)
            r.update(B=b, V=vocab)
            rows.append(r)
            floor = b * vocab * 4 / bw["write"] * 1e6
            for mode in MODES:
                f = {k: (f"{v:7.1f}" if v else "      -") for k, v in r[mode].items()}
                print(f"B={b:<4d} V={vocab:<7d} {mode:5s} floor {floor:6.1f}/{floor * 5:6.1f} | "
                      + " ".join(f"{k} {v}" for k, v in f.items()), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"copy_bytes_per_s": bw, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
