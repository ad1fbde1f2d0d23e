"""Single-sequence generation through ``ModelRunner``, plain or greedy-speculative.

``python -m models.generate "prompt"`` (what ``make generate`` runs) loads the embedded
model, applies its chat template and streams the reply. With ``--draft`` it decodes
speculatively (greedy: the output equals the target alone token for token) and reports the
acceptance. The batched engine with full sampling settings lives in the engine issue's code;
this is the minimal loop the models layer needs to be exercised and measured.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from models.drafts import Draft, ModelDraft, NgramDraft, make_draft
from models.loader import DEFAULT_MODEL, load_model
from models.runner import ModelRunner
from models.transformer import from_hf


@dataclass
class GenerationResult:
    tokens: list[int]
    seconds: float
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    per_step: list[int] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens emitted per target step (1 + accepted drafts)."""
        return len(self.tokens) / self.steps if self.steps else 0.0


def _pick(logits: torch.Tensor, temperature: float, gen: torch.Generator | None) -> int:
    if temperature <= 0:
        return int(logits.argmax())
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return int(torch.multinomial(probs, 1, generator=gen))


def generate(runner: ModelRunner, prompt: list[int], max_new_tokens: int,
             temperature: float = 0.0, seed: int = 0, stop_ids: tuple[int, ...] = (),
             on_token: Callable[[int], None] | None = None, slot: int = 0) -> GenerationResult:
    """Target-only decoding of one sequence (greedy when ``temperature`` is 0)."""
    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    logits = runner.prefill([slot], [prompt])[0]
    out: list[int] = []
    while True:
        tok = _pick(logits, temperature, gen)
        out.append(tok)
        if on_token:
            on_token(tok)
        if len(out) >= max_new_tokens or tok in stop_ids:
            break
        logits = runner.forward([slot], [[tok]])[0, -1]
    runner.free(slot)
    return GenerationResult(out, time.perf_counter() - start, steps=len(out))


def speculative_generate(target: ModelRunner, draft: Draft, draft_runner: ModelRunner | None,
                         prompt: list[int], max_new_tokens: int, k: int,
                         stop_ids: tuple[int, ...] = (),
                         on_token: Callable[[int], None] | None = None) -> GenerationResult:
    """Greedy speculative decoding of one sequence; output equals target-only greedy."""
    start = time.perf_counter()
    seq = list(prompt)
    seq.append(int(target.prefill([0], [prompt])[0].argmax()))
    if draft_runner is not None:
        draft_runner.prefill([0], [prompt])
    res = GenerationResult([seq[-1]], 0.0, steps=1)
    if on_token:
        on_token(seq[-1])
    while len(res.tokens) < max_new_tokens and seq[-1] not in stop_ids:
        budget = min(k, max_new_tokens - len(res.tokens) - 1,
                     target.max_seq_len - len(seq))
        proposal = _propose(draft, draft_runner, seq, max(budget, 0))
        base = target.length(0)  # == len(seq) - 1: every token but the last is cached
        logits = target.forward([0], [[seq[-1]] + proposal])[0]
        choice = logits.argmax(-1).tolist()
        acc = 0
        while acc < len(proposal) and proposal[acc] == choice[acc]:
            acc += 1
        new = proposal[:acc] + [choice[acc]]
        target.rollback([0], [base + 1 + acc])
        if draft_runner is not None:
            draft_runner.rollback([0], [min(draft_runner.length(0), base + 1 + acc)])
        res.steps += 1
        res.drafted += len(proposal)
        res.accepted += acc
        res.per_step.append(acc)
        for tok in new:
            seq.append(tok)
            res.tokens.append(tok)
            if on_token:
                on_token(tok)
            if tok in stop_ids or len(res.tokens) >= max_new_tokens:
                break
    target.free(0)
    if draft_runner is not None:
        draft_runner.free(0)
    res.seconds = time.perf_counter() - start
    return res


def _propose(draft: Draft, runner: ModelRunner | None, seq: list[int], k: int) -> list[int]:
    if k <= 0:
        return []
    if isinstance(draft, NgramDraft):
        return draft.propose(seq, k)
    assert runner is not None
    pending = seq[runner.length(0):]  # tokens the draft has not cached yet (1 or 2)
    logits = runner.forward([0], [pending])[0, -1]
    out = [int(logits.argmax())]
    while len(out) < k:
        out.append(int(runner.forward([0], [[out[-1]]])[0, -1].argmax()))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Generate text with the SonicSpec model runner.")
    ap.add_argument("prompt")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--draft", default=None, help="self:N, quant:int8, ngram:N or a model spec")
    ap.add_argument("--k", type=int, default=4, help="draft tokens per step")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--raw", action="store_true", help="no chat template")
    args = ap.parse_args(argv)
    loaded = load_model(args.model)
    tok = loaded.tokenizer
    if args.raw or not tok.chat_template:
        prompt = tok(args.prompt).input_ids
    else:
        text = tok.apply_chat_template([{"role": "user", "content": args.prompt}],
                                       add_generation_prompt=True, tokenize=False)
        prompt = tok(text, add_special_tokens=False).input_ids
    lm = from_hf(loaded.model)
    max_len = len(prompt) + args.max_new_tokens + args.k + 2
    target = ModelRunner(lm, 1, max_len)
    stop = tuple(i for i in [tok.eos_token_id] if i is not None)
    shown: list[int] = []
    printed = [0]

    def stream(t: int) -> None:
        shown.append(t)
        text = tok.decode(shown, skip_special_tokens=True)
        sys.stdout.write(text[printed[0]:])
        sys.stdout.flush()
        printed[0] = len(text)

    if args.draft:
        if args.temperature > 0:
            ap.error("--draft decodes greedily here; leave --temperature at 0")
        draft = make_draft(args.draft, loaded, lm)
        druns = ModelRunner(draft.model, 1, max_len) if isinstance(draft, ModelDraft) else None
        res = speculative_generate(target, draft, druns, prompt, args.max_new_tokens, args.k,
                                   stop, stream)
        extra = (f", draft {args.draft} k={args.k}: {res.accepted}/{res.drafted} drafts "
                 f"accepted, {res.mean_accepted_length:.2f} tokens per target step")
    else:
        res = generate(target, prompt, args.max_new_tokens, args.temperature, args.seed,
                       stop, stream)
        extra = ""
    print(f"\n[sonicspec] {len(res.tokens)} tokens in {res.seconds:.2f} s = "
          f"{res.tokens_per_second:.1f} tok/s{extra}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
