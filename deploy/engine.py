"""The engine deployment: owns the scheduler loop and the two model actors.

A background thread steps ``scheduler.engine.Engine`` while there is work; each step is
``draft.propose`` (one hop) then ``target.verify`` (one hop), plus ``target.prefill`` (one
hop) on steps that admit requests. ``generate`` is an async generator that the ingress calls
through a streaming ``DeploymentHandle``: its first item is ``{"prompt_tokens": n}`` or
``{"error": ...}``, then one item per engine event of that request.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import ray
from ray import serve

from deploy.actors import HopTimer, RemoteDraft, RemoteTarget, spawn
from deploy.config import AppArgs, Knobs
from deploy.protocol import ApiError, GenerateRequest
from scheduler import Request, RequestEvent, RequestStatus, Scheduler, SchedulerConfig
from scheduler.engine import Engine

log = logging.getLogger("ray.serve")


@dataclass
class _Stream:
    """One live request: where its events go and what was sent so far."""

    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue
    request: Request
    logprobs: int | None
    sent: int = 0


@serve.deployment(max_ongoing_requests=256, health_check_period_s=10)
class LLMEngine:
    def __init__(self, args: AppArgs):
        self.args = args
        t0 = time.perf_counter()
        log.info("[sonicspec] starting model actors: target=%s draft=%s", args.target,
                 args.draft)
        target, draft = spawn(args)
        info = ray.get(target.info.remote())
        if draft is not None:
            ray.get(draft.info.remote())
        self.tokenizer, self.vocab = info["tokenizer"], info["vocab_size"]
        self.eos_ids = _eos_ids(self.tokenizer)
        self.timer = HopTimer()
        self.actors = (target, draft)
        config = SchedulerConfig(max_slots=args.max_slots, max_seq_len=args.max_seq_len,
                                 k_max=args.max_k_max, adaptive=args.adaptive)
        scheduler = Scheduler(config, lambda ids: self.tokenizer.decode(ids))
        self.engine = Engine(scheduler, RemoteTarget(target, self.timer),
                             RemoteDraft(draft, self.timer) if draft is not None else None)
        self.knobs = args.knobs
        scheduler.update(k_max=self.knobs.k_max, adaptive=self.knobs.adaptive)
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.inbox: list[Request] = []
        self.aborts: list[str] = []
        self.streams: dict[str, _Stream] = {}
        self.steps, self.step_seconds = 0, 0.0
        self.thread = threading.Thread(target=self._loop, name="engine-loop", daemon=True)
        self.thread.start()
        log.info("[sonicspec] engine ready in %.1f s (target on %s)",
                 time.perf_counter() - t0, info["device"])

    # -- Serve hooks ------------------------------------------------------------------
    def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Runtime knobs (``user_config``): k_max and adaptive, applied from the next step."""
        knobs = Knobs.model_validate(user_config or {})
        if knobs.k_max > self.args.max_k_max:
            raise ValueError(f"k_max={knobs.k_max} exceeds max_k_max={self.args.max_k_max}")
        with self.lock:
            self.engine.scheduler.update(k_max=knobs.k_max, adaptive=knobs.adaptive)
            self.knobs = knobs
        log.info("[sonicspec] knobs now %s", knobs.model_dump())

    def check_health(self) -> None:
        if not self.thread.is_alive():
            raise RuntimeError("engine loop thread died")

    # -- API ----------------------------------------------------------------------------
    async def generate(self, req: GenerateRequest):
        try:
            request = await asyncio.to_thread(self._prepare, req)
        except ApiError as err:
            yield {"error": err.body(), "status": err.status}
            return
        stream = _Stream(asyncio.get_running_loop(), asyncio.Queue(), request, req.logprobs)
        with self.lock:
            self.streams[request.request_id] = stream
            self.inbox.append(request)
        self.wake.set()
        yield {"prompt_tokens": len(request.prompt_ids)}
        finished = False
        try:
            while not finished:
                item = await stream.queue.get()
                finished = "usage" in item
                yield item
        finally:
            if not finished:
                with self.lock:
                    self.aborts.append(request.request_id)
                self.wake.set()

    def model_info(self) -> dict[str, Any]:
        return {"id": self.args.model_name, "max_model_len": self.args.max_seq_len,
                "vocab_size": self.vocab}

    def stats(self, reset: bool = False) -> dict[str, Any]:
        """Engine counters, knobs and the per-call hop times between engine and actors."""
        with self.lock:
            st = self.engine.scheduler.stats()
            steps, secs = self.steps, self.step_seconds
        out = {"engine": {k: v for k, v in vars(st).items() if not k.startswith("_")},
               "steps": steps, "step_ms_mean": 1000 * secs / steps if steps else 0.0,
               "knobs": self.knobs.model_dump(), "hops": self.timer.summary()}
        if reset:
            self.timer.reset()
        return out

    # -- request preparation (tokenizer-dependent checks) -----------------------------
    def _prepare(self, req: GenerateRequest) -> Request:
        tok = self.tokenizer
        if req.is_chat:
            try:
                text = tok.apply_chat_template(_chat_messages(req.prompt), tokenize=False,
                                               add_generation_prompt=True)
            except Exception as err:  # the template rejects the conversation
                raise ApiError(f"messages do not fit the chat template: {err}",
                               "messages") from None
            ids, param = list(tok(text, add_special_tokens=False).input_ids), "messages"
        elif isinstance(req.prompt, str):
            ids, param = list(tok(req.prompt).input_ids), "prompt"
        else:
            ids, param = list(req.prompt), "prompt"  # type: ignore[arg-type]
            if any(not 0 <= t < self.vocab for t in ids):
                raise ApiError(f"prompt token ids must be in [0, {self.vocab})", "prompt")
        if not ids:
            raise ApiError("the prompt is empty", param)
        room = self.args.max_seq_len - len(ids)
        if room < 1:
            raise ApiError(f"the prompt has {len(ids)} tokens; the context is "
                           f"{self.args.max_seq_len}", param, code="context_length_exceeded")
        max_tokens = req.max_tokens or min(req.default_max_tokens or room, room)
        if max_tokens > room:
            raise ApiError(f"max_tokens={max_tokens} plus the prompt's {len(ids)} tokens exceeds "
                           f"the context of {self.args.max_seq_len}", "max_tokens",
                           code="context_length_exceeded")
        self._check_settings(req)
        return Request(req.request_id, ids, sampling=req.sampling, max_tokens=max_tokens,
                       stop=req.stop, stop_token_ids=req.stop_token_ids,
                       eos_token_ids=self.eos_ids, ignore_eos=req.ignore_eos,
                       num_speculative_tokens=req.num_speculative_tokens)

    def _check_settings(self, req: GenerateRequest) -> None:
        from sampler.grammar import compile_params

        p = req.sampling
        bad = [t for t in (p.logit_bias or {}) if t >= self.vocab]
        if bad:
            raise ApiError(f"logit_bias token id {bad[0]} is outside the vocabulary "
                           f"[0, {self.vocab})", "logit_bias")
        if p.top_k > self.vocab:
            raise ApiError(f"top_k must be 0 (off) or 1..{self.vocab}", "top_k")
        if any(not 0 <= t < self.vocab for t in req.stop_token_ids):
            raise ApiError(f"stop_token_ids must be in [0, {self.vocab})", "stop_token_ids")
        if (req.num_speculative_tokens or 0) > self.args.max_k_max:
            raise ApiError(f"num_speculative_tokens must be <= {self.args.max_k_max}",
                           "num_speculative_tokens")
        if p.has_grammar:
            try:
                compile_params(p, self.tokenizer, self.vocab)
            except Exception as err:  # xgrammar raises several types for bad schemas
                raise ApiError(f"invalid response_format schema: {err}",
                               "response_format") from None

    # -- the loop -----------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            self.wake.wait()
            with self.lock:
                for request in self.inbox:
                    self.engine.add(request)
                for rid in self.aborts:
                    self.engine.abort(rid)
                self.inbox, self.aborts = [], []
                if not self.engine.has_work():
                    self.wake.clear()
                    continue
                t0 = time.perf_counter()
                try:
                    events = self.engine.step()
                except Exception:  # a scheduler bug: fail everything, keep serving
                    log.exception("[sonicspec] engine step raised; aborting all requests")
                    events = self._fail_all()
                self.steps += 1
                self.step_seconds += time.perf_counter() - t0
                deliveries = [self._payload(ev) for ev in events]
            for stream, payload in deliveries:
                if stream is not None:
                    stream.loop.call_soon_threadsafe(stream.queue.put_nowait, payload)

    def _fail_all(self) -> list[RequestEvent]:
        config = self.engine.scheduler.config
        scheduler = Scheduler(config, lambda ids: self.tokenizer.decode(ids))
        scheduler.update(k_max=self.knobs.k_max, adaptive=self.knobs.adaptive)
        target, draft = self.engine.target, self.engine.draft
        target.free(range(config.max_slots))
        if draft is not None:
            draft.free(range(config.max_slots))
        self.engine = Engine(scheduler, target, draft)
        return [RequestEvent(rid, (), "", RequestStatus.FAILED, "error")
                for rid in list(self.streams)]

    def _payload(self, ev: RequestEvent) -> tuple[_Stream | None, dict[str, Any]]:
        stream = self.streams.get(ev.request_id)
        if stream is None:
            return None, {}
        item: dict[str, Any] = {"text": ev.text, "token_ids": list(ev.token_ids),
                                "finish_reason": ev.finish_reason}
        if stream.logprobs is not None:
            item["logprobs"] = self._logprobs(stream, len(ev.token_ids), ev.token_ids)
        stream.sent += len(ev.token_ids)
        if ev.finished:
            self.streams.pop(ev.request_id, None)
            self.engine.pop_output(ev.request_id)
            item["usage"] = _usage(stream.request)
            if ev.status is RequestStatus.FAILED:
                item["error"] = "the engine failed this request (see the server log)"
        return stream, item

    def _logprobs(self, stream: _Stream, n: int, ids) -> list[dict[str, Any]]:
        out = self.engine.outputs.get(stream.request.request_id)
        rows = out.logprobs[stream.sent:stream.sent + n] if out is not None else []
        dec = lambda t: self.tokenizer.decode([t])  # noqa: E731
        top = stream.logprobs or 0
        return [{"token": dec(t), "id": t, "logprob": lp.logprob,
                 "top": [(dec(i), v) for i, v in lp.top[:top]]}
                for t, lp in zip(ids, rows)]


def _usage(request: Request) -> dict[str, Any]:
    st = request.stats
    return {"prompt_tokens": len(request.prompt_ids),
            "completion_tokens": len(request.output_ids),
            "drafted_tokens": st.total_drafted, "accepted_tokens": st.total_accepted,
            "decode_steps": len(st.drafted)}


def _chat_messages(messages) -> list[dict[str, Any]]:
    """OpenAI messages -> the template's: content parts joined into one string."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        out.append({"role": m.get("role", "user"), "content": content or ""})
    return out


def _eos_ids(tok) -> tuple[int, ...]:
    """The tokenizer's EOS and, for ChatML templates, ``<|im_end|>``."""
    ids = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    if "<|im_end|>" in tok.get_vocab():
        ids.add(tok.convert_tokens_to_ids("<|im_end|>"))
    return tuple(sorted(ids))
