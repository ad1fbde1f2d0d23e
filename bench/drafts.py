"""Draft kinds on the embedded model: acceptance and speed-up over target-only (CPU).

Greedy speculative decoding of one sequence (output identical to target-only greedy, checked
here) for each draft spec and k; the baseline is target-only greedy through the same runner,
measured in the same run. Prints a table and writes bench/results/drafts-<device>.json.

    python bench/drafts.py [--max-new-tokens 128] [--drafts self:8 self:16 ...] [--k 2 4]
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/sampler.py would shadow the sampler package: put the repository root first.
sys.path[0] = str(Path(__file__).resolve().parents[1])

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402

import torch  # noqa: E402

from models.drafts import ModelDraft, make_draft  # noqa: E402
from models.generate import generate, speculative_generate  # noqa: E402
from models.loader import load_model  # noqa: E402
from models.runner import ModelRunner  # noqa: E402
from models.transformer import from_hf  # noqa: E402

PROMPTS = {
    "chat": "Explain in a few sentences why the sky is blue.",
    "code-edit": ("Rename the variable `total` to `acc` in this function and output the whole "
                  "function:\n\ndef mean(values):\n    total = 0\n    for v in values:\n"
                  "        total += v\n    return total / len(values)\n"),
}


def chat_ids(tok, text: str) -> list[int]:
    rendered = tok.apply_chat_template([{"role": "user", "content": text}],
                                       add_generation_prompt=True, tokenize=False)
    return tok(rendered, add_special_tokens=False).input_ids


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--drafts", nargs="+",
                    default=["self:8", "self:16", "self:24", "quant:int8", "ngram:2", "ngram:3"])
    ap.add_argument("--k", nargs="+", type=int, default=[2, 4])
    args = ap.parse_args()
    torch.manual_seed(0)
    loaded = load_model()
    tok, lm = loaded.tokenizer, from_hf(loaded.model)
    n = args.max_new_tokens
    rows = []
    for name, text in PROMPTS.items():
        prompt = chat_ids(tok, text)
        max_len = len(prompt) + n + max(args.k) + 2
        generate(ModelRunner(lm, 1, max_len), prompt, 8)  # warm-up
        base = generate(ModelRunner(lm, 1, max_len), prompt, n)
        rows.append(dict(prompt=name, draft="target-only", k=0, tok_s=base.tokens_per_second,
                         accept=None, tokens_per_step=1.0, speedup=1.0))
        for spec in args.drafts:
            draft = make_draft(spec, loaded, lm)
            for k in args.k:
                druns = ModelRunner(draft.model, 1, max_len) if isinstance(draft, ModelDraft) \
                    else None
                res = speculative_generate(ModelRunner(lm, 1, max_len), draft, druns, prompt,
                                           n, k)
                assert res.tokens == base.tokens, f"{spec} k={k}: output differs from target"
                rows.append(dict(prompt=name, draft=spec, k=k, tok_s=res.tokens_per_second,
                                 accept=res.accepted / max(res.drafted, 1),
                                 tokens_per_step=res.mean_accepted_length,
                                 speedup=res.tokens_per_second / base.tokens_per_second))
    print(f"\nembedded SmolLM2-135M-Instruct, fp32, {platform.processor() or 'cpu'}, "
          f"{torch.get_num_threads()} threads, greedy, {n} new tokens")
    print(f"{'prompt':10} {'draft':12} {'k':>2} {'tok/s':>7} {'accept':>7} {'tok/step':>8} "
          f"{'speedup':>8}")
    for r in rows:
        acc = "-" if r["accept"] is None else f"{r['accept']:.2f}"
        print(f"{r['prompt']:10} {r['draft']:12} {r['k']:>2} {r['tok_s']:7.1f} {acc:>7} "
              f"{r['tokens_per_step']:8.2f} {r['speedup']:7.2f}x")
    out = Path(__file__).parent / "results" / "drafts-cpu.json"
    out.write_text(json.dumps(dict(device="cpu", new_tokens=n, rows=rows), indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
