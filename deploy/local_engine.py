"""Build an in-process engine: target and draft workers in this process (tests, benchmarks).

The Ray deployment wraps the same workers in actors; this is the single-process wiring.
"""

from __future__ import annotations

from typing import Any

import torch

from deploy.workers import DraftWorker, TargetWorker
from models.drafts import ModelDraft, make_draft
from models.loader import LoadedModel, load_model
from models.runner import ModelRunner
from models.transformer import from_hf
from scheduler import Scheduler, SchedulerConfig
from scheduler.engine import Engine

DEFAULT_DRAFT = "quant:int8"


def build_engine(target: str | LoadedModel = "embedded:smollm2-135m",
                 draft: str | None = DEFAULT_DRAFT, *, max_slots: int = 8,
                 max_seq_len: int = 512, k_max: int = 4, adaptive: bool = True,
                 backend: str = "auto", device: str = "cpu",
                 dtype: torch.dtype = torch.float32, **scheduler_kwargs: Any) -> Engine:
    """An ``Engine`` over ``target`` (a spec or a loaded model) and ``draft`` (a draft spec,
    see ``models.drafts``, or None for target-only decoding)."""
    loaded = target if isinstance(target, LoadedModel) else load_model(target, device, dtype)
    lm = from_hf(loaded.model)
    target_worker = TargetWorker(ModelRunner(lm, max_slots, max_seq_len), loaded.tokenizer,
                                 backend)
    draft_worker = None
    if draft:
        d = make_draft(draft, loaded, lm)
        runner = ModelRunner(d.model, max_slots, max_seq_len) if isinstance(d, ModelDraft) \
            else None
        draft_worker = DraftWorker(d, runner)
    config = SchedulerConfig(max_slots=max_slots, max_seq_len=max_seq_len,
                             k_max=k_max if draft else 0, adaptive=adaptive, **scheduler_kwargs)
    tok = loaded.tokenizer
    return Engine(Scheduler(config, lambda ids: tok.decode(ids)), target_worker, draft_worker)
