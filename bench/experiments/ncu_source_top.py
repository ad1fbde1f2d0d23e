"""Top SASS instructions of an Nsight Compute source page (CSV, `ncu -i R --page source
--csv --print-source sass`) by warp-stall samples: where a kernel's warps wait. Measurement."""
import csv
import sys


def main(path: str, top: int = 45) -> None:
    with open(path, errors="replace") as f:
        rows = list(csv.reader(f))
    head_i = next(i for i, r in enumerate(rows) if any("Source" in c for c in r))
    head = rows[head_i]
    print("columns:", " | ".join(head))
    def col(*names):
        for n in names:
            for i, c in enumerate(head):
                if n.lower() in c.lower():
                    return i
        return None
    src = col("Source")
    addr = col("Address")
    samp = col("Warp Stall Sampling (All", "Sampling Data (All", "Stall Sampling")
    execd = col("Instructions Executed", "Warp Instructions Executed")
    body = [r for r in rows[head_i + 1:] if len(r) == len(head)]
    def num(r, i):
        try:
            return float(r[i].replace(",", "")) if i is not None and r[i] else 0.0
        except ValueError:
            return 0.0
    total = sum(num(r, samp) for r in body) or 1.0
    print(f"instructions {len(body)}, samples {total:.0f}")
    for r in sorted(body, key=lambda r: -num(r, samp))[:top]:
        print(f"{r[addr] if addr is not None else '':>8} {100 * num(r, samp) / total:5.1f}% "
              f"exec {num(r, execd):>10.0f}  {r[src][:90]}")
    # the samples in address order, cumulated by 64-instruction windows (phases)
    print("by window of 64 instructions (address order): share of samples")
    for w in range(0, len(body), 64):
        s = sum(num(r, samp) for r in body[w:w + 64])
        if s / total >= 0.01:
            print(f"  {w:5d}-{w + 63:5d} {100 * s / total:5.1f}%  first: {body[w][src][:60]}")


if __name__ == "__main__":
    main(sys.argv[1])
