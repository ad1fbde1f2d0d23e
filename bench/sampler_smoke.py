"""GPU smoke check of the Triton sampler against the torch backend (seeded tokens, peaked
and flat logits, sample and verify K=4) with the rows per path; prints one line per case."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[0] = str(Path(__file__).resolve().parents[1])
from bench.sampler import K, make_batch  # noqa: E402
from sampler import torch_backend as ref  # noqa: E402
from sampler import triton_backend as tri  # noqa: E402


def main() -> None:
    for vocab in (32000, 128256, 262144):
        for rows in (7, 64):
            for scale in (3.0, 8.0):
                g = torch.Generator(device="cuda").manual_seed(rows + vocab)
                logits = torch.randn(rows, K + 1, vocab, device="cuda", generator=g) * scale
                drafts = logits[:, :K].argmax(-1)
                drafts[1::3, 1] = 7
                first = logits[:, 0].contiguous()
                sb, vb = make_batch(rows, vocab, 1, "cuda"), make_batch(rows, vocab, K + 1, "cuda")
                none = torch.empty(rows, 0, dtype=torch.int64, device="cuda")
                s_ref = ref.sample(first, sb).tokens
                s_tri = tri._run(first[:, None], none, sb, None, None)
                v_ref = ref.verify(logits, drafts, vb)
                v_tri = tri._run(logits, drafts, vb, None, None)
                same_s = (s_ref == s_tri.tokens[:, 0]).sum().item()
                same_v = (v_ref.tokens == v_tri.tokens).all(1).sum().item()
                same_a = (v_ref.num_accepted == v_tri.num_accepted).sum().item()
                print(f"V={vocab} B={rows} scale={scale:g}: sample {same_s}/{rows} "
                      f"verify {same_v}/{rows} accepted {same_a}/{rows} "
                      f"paths s={torch.bincount(s_tri.path.long(), minlength=4).tolist()} "
                      f"v={torch.bincount(v_tri.path.long(), minlength=4).tolist()}", flush=True)


if __name__ == "__main__":
    main()
