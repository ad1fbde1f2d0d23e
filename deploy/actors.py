"""The draft and the target, each in its own Ray actor, and the engine-side proxies.

Each actor builds its model where it runs (its own GPU with ``num_gpus=1``, else the CPU)
and wraps ``deploy.workers.TargetWorker`` / ``DraftWorker`` unchanged. Every method returns
``(result, seconds spent inside the actor)``, so the proxy can split a call's round trip
into compute and Ray overhead (the "hop"). ``free`` is fire-and-forget: calls from one
caller to a sequential actor run in submission order, so it needs no round trip.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import ray

from deploy.config import AppArgs
from scheduler.engine import Emitted, PrefillItem, ProposeItem, VerifyItem


def _device_and_dtype(dtype: str):
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dtype == "auto":
        return device, torch.bfloat16 if device.type == "cuda" else torch.float32
    return device, getattr(torch, dtype)


def _threads(n: int) -> None:
    if n:
        import torch

        torch.set_num_threads(n)


def _capture(runner: Any, widths: Sequence[int]) -> None:
    from models.cuda_graph import GraphRunner

    if runner.device.type == "cuda":
        GraphRunner(runner, tokens_per_row=widths)


class _Timed:
    def _timed(self, fn, *a):
        t0 = time.perf_counter()
        out = fn(*a)
        return out, time.perf_counter() - t0


@ray.remote  # sequential: calls run one at a time, in submission order
class TargetActor(_Timed):
    """The target model: ``TargetWorker`` over a ``ModelRunner`` on this actor's device."""

    def __init__(self, args: AppArgs):
        from deploy.workers import TargetWorker
        from models.loader import load_model
        from models.runner import ModelRunner
        from models.transformer import from_hf

        _threads(args.torch_threads)
        device, dtype = _device_and_dtype(args.dtype)
        loaded = load_model(args.target, device=device, dtype=dtype)
        runner = ModelRunner(from_hf(loaded.model), args.max_slots, args.max_seq_len)
        if args.cuda_graphs:
            _capture(runner, range(1, args.max_k_max + 2))
        self.tokenizer = loaded.tokenizer
        self.worker = TargetWorker(runner, loaded.tokenizer, args.sampler_backend)
        self.device = str(device)

    def info(self) -> dict[str, Any]:
        """What the engine needs: the tokenizer (for text), vocab size, device, pid."""
        return {"tokenizer": self.tokenizer, "vocab_size": self.worker.vocab,
                "device": self.device, "pid": os.getpid()}

    def prefill(self, items: Sequence[PrefillItem]):
        return self._timed(self.worker.prefill, items)

    def verify(self, items: Sequence[VerifyItem]):
        return self._timed(self.worker.verify, items)

    def free(self, slots: Sequence[int]) -> None:
        self.worker.free(slots)


@ray.remote  # sequential: calls run one at a time, in submission order
class DraftActor(_Timed):
    """The draft: ``DraftWorker`` over its own runner (none for ``ngram:N``)."""

    def __init__(self, args: AppArgs):
        from deploy.workers import DraftWorker
        from models.drafts import Draft, ModelDraft, NgramDraft, make_draft
        from models.loader import load_model
        from models.runner import ModelRunner
        from models.transformer import from_hf

        _threads(args.torch_threads)
        assert args.draft is not None
        device, dtype = _device_and_dtype(args.dtype)
        runner = None
        draft: Draft
        if args.draft.startswith("ngram:"):
            # make_draft wants the target even for prompt lookup, which needs no model
            draft = NgramDraft(int(args.draft[6:]), args.draft)
        else:
            loaded = load_model(args.target, device=device, dtype=dtype)
            draft = make_draft(args.draft, loaded, from_hf(loaded.model), device, dtype)
        if isinstance(draft, ModelDraft):
            runner = ModelRunner(draft.model, args.max_slots, args.max_seq_len)
            if args.cuda_graphs:
                _capture(runner, (1,))
        self.worker = DraftWorker(draft, runner)
        self.device = str(device)

    def info(self) -> dict[str, Any]:
        return {"device": self.device, "pid": os.getpid()}

    def propose(self, items: Sequence[ProposeItem]):
        return self._timed(self.worker.propose, items)

    def free(self, slots: Sequence[int]) -> None:
        self.worker.free(slots)


def spawn(args: AppArgs) -> tuple[Any, Any | None]:
    """Start the target and (if any) the draft actor with their configured resources."""
    opts = lambda r: {"num_gpus": r.num_gpus, "num_cpus": r.num_cpus}  # noqa: E731
    target = TargetActor.options(**opts(args.target_actor)).remote(args)  # type: ignore[attr-defined]
    draft = None
    if args.draft:
        draft = DraftActor.options(  # type: ignore[attr-defined]
            **opts(args.draft_actor)).remote(args)
    return target, draft


class HopTimer:
    """Round trips of engine -> actor calls, split into in-actor compute and Ray overhead."""

    def __init__(self, keep: int = 20000):
        self.keep = keep
        self.samples: dict[str, list[tuple[float, float]]] = {}
        self.lock = threading.Lock()

    def record(self, method: str, total: float, compute: float) -> None:
        with self.lock:
            rows = self.samples.setdefault(method, [])
            rows.append((total, compute))
            if len(rows) > self.keep:
                del rows[: len(rows) - self.keep]

    def reset(self) -> None:
        with self.lock:
            self.samples.clear()

    def summary(self) -> dict[str, dict[str, float]]:
        """Per method: calls, and p50/p99 of the round trip and of the hop (round trip minus
        compute), in milliseconds."""
        with self.lock:
            snap = {m: list(r) for m, r in self.samples.items()}
        out = {}
        for method, rows in snap.items():
            total = sorted(t for t, _ in rows)
            hop = sorted(t - c for t, c in rows)
            out[method] = {"calls": len(rows), "round_trip_p50_ms": _pct(total, 50),
                           "round_trip_p99_ms": _pct(total, 99), "hop_p50_ms": _pct(hop, 50),
                           "hop_p99_ms": _pct(hop, 99)}
        return out


def _pct(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    i = min(len(sorted_values) - 1, round(q / 100 * (len(sorted_values) - 1)))
    return 1000 * sorted_values[i]


class RemoteTarget:
    """``scheduler.engine.TargetModel`` over a ``TargetActor``: one hop per call."""

    def __init__(self, actor: Any, timer: HopTimer):
        self.actor, self.timer = actor, timer

    def _call(self, name: str, items) -> list[Emitted]:
        t0 = time.perf_counter()
        out, compute = ray.get(getattr(self.actor, name).remote(list(items)))
        self.timer.record(f"target.{name}", time.perf_counter() - t0, compute)
        return out

    def prefill(self, items: Sequence[PrefillItem]) -> list[Emitted]:
        return self._call("prefill", items)

    def verify(self, items: Sequence[VerifyItem]) -> list[Emitted]:
        return self._call("verify", items)

    def free(self, slots: Sequence[int]) -> None:
        self.actor.free.remote(list(slots))


class RemoteDraft:
    """``scheduler.engine.DraftModel`` over a ``DraftActor``: one hop per propose."""

    def __init__(self, actor: Any, timer: HopTimer):
        self.actor, self.timer = actor, timer

    def propose(self, items: Sequence[ProposeItem]) -> list[tuple[int, ...]]:
        t0 = time.perf_counter()
        out, compute = ray.get(self.actor.propose.remote(list(items)))
        self.timer.record("draft.propose", time.perf_counter() - t0, compute)
        return out

    def free(self, slots: Sequence[int]) -> None:
        self.actor.free.remote(list(slots))
