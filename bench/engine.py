"""Engine throughput on the CPU with the embedded pair: speculation k in {0, 2, 4, 6} and
adaptive, batch 1 and 8, against target-only decoding (no draft) measured in the same run.

    python bench/engine.py [--draft quant:int8] [--max-tokens 48]

Prints a table and writes bench/results/engine-cpu.json. Greedy requests, so every
configuration must produce the target-only text (checked).
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/sampler.py would shadow the sampler package: put the repository root first.
sys.path[0] = str(Path(__file__).resolve().parents[1])

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from deploy.local_engine import DEFAULT_DRAFT, build_engine  # noqa: E402
from models.loader import load_model  # noqa: E402
from sampler import SamplingParams  # noqa: E402
from scheduler import Request  # noqa: E402

PROMPTS = [
    "Explain why the sky is blue.", "Write a Python function that reverses a string.",
    "List the planets of the solar system.", "What is speculative decoding?",
    "Give three tips for writing clear code.", "Summarise the plot of Hamlet.",
    "Translate 'good morning' into French, Spanish and German.", "Count from 1 to 20.",
]


def run_config(loaded, draft, k, adaptive, batch, max_tokens):
    tok = loaded.tokenizer
    eng = build_engine(loaded, draft, max_slots=batch, max_seq_len=256, k_max=k,
                       adaptive=adaptive, backend="torch")
    reqs = []
    for i in range(batch):
        text = tok.apply_chat_template([{"role": "user", "content": PROMPTS[i]}],
                                       add_generation_prompt=True, tokenize=False)
        reqs.append(Request(f"r{i}", tok(text, add_special_tokens=False).input_ids,
                            SamplingParams(temperature=0.0), max_tokens=max_tokens,
                            ignore_eos=True))
    for r in reqs:
        eng.add(r)
    start = time.perf_counter()
    while eng.has_work():
        eng.step()
    seconds = time.perf_counter() - start
    st = eng.scheduler.stats()
    outputs = [r.output_ids for r in reqs]
    return dict(tokens=st.emitted_tokens, seconds=seconds, tok_s=st.emitted_tokens / seconds,
                drafted=st.drafted_tokens, accepted=st.accepted_tokens,
                mean_accept_len=st.mean_acceptance_length), outputs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draft", default=DEFAULT_DRAFT)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--repeats", type=int, default=3, help="median of this many runs")
    args = ap.parse_args()
    loaded = load_model()
    rows = []
    configs = [("target-only", None, 0, False)] + [
        (f"k={k}", args.draft, k, False) for k in (0, 2, 4, 6)] + [
        ("adaptive", args.draft, 6, True)]
    for batch in args.batches:
        runs: dict[str, list[dict]] = {name: [] for name, *_ in configs}
        for rep in range(args.repeats):  # interleaved, so drifting machine load hits all alike
            base_out = None
            for name, draft, k, adaptive in configs:
                res, outputs = run_config(loaded, draft, k, adaptive, batch, args.max_tokens)
                base_out = outputs if base_out is None else base_out
                assert outputs == base_out, f"{name}: greedy output differs from target-only"
                runs[name].append(res)
                print(f"batch {batch:2d} rep {rep} {name:12s} {res['tok_s']:7.1f} tok/s",
                      flush=True)
        base_tok_s = statistics.median(r["tok_s"] for r in runs["target-only"])
        for name, results in runs.items():
            res = dict(results[0])
            res.update(tok_s=statistics.median(r["tok_s"] for r in results),
                       tok_s_runs=[r["tok_s"] for r in results], config=name, batch=batch)
            res["speedup"] = res["tok_s"] / base_tok_s
            rows.append(res)
    print(f"\nEngine, embedded SmolLM2-135M target + {args.draft} draft, fp32 CPU "
          f"({torch.get_num_threads()} threads), greedy, {args.max_tokens} tokens/request, "
          f"median of {args.repeats} interleaved runs")
    print(f"{'batch':>5} {'config':12} {'tok/s':>7} {'accept':>7} {'tok/step':>8} {'speedup':>8}")
    for r in rows:
        spec = r["drafted"] > 0
        acc = f"{r['accepted'] / r['drafted']:.2f}" if spec else "-"
        per_step = f"{r['mean_accept_len']:.2f}" if spec else "1.00"
        print(f"{r['batch']:5d} {r['config']:12} {r['tok_s']:7.1f} {acc:>7} "
              f"{per_step:>8} {r['speedup']:7.2f}x")
    out = Path(__file__).parent / "results" / "engine-cpu.json"
    out.write_text(json.dumps(dict(device="cpu", draft=args.draft, rows=rows), indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
