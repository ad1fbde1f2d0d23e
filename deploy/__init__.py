"""Ray Serve deployment of SonicSpec: an OpenAI-compatible HTTP API over the speculative engine.

Where a request goes::

    HTTP -> OpenAIServer (deploy/api.py, FastAPI ingress; parses and validates the body)
         -> LLMEngine.generate (deploy/engine.py; streaming DeploymentHandle, one item per
            engine event) -> scheduler.engine.Engine, stepped by a background thread
         -> DraftActor.propose / TargetActor.prefill, verify (deploy/actors.py; Ray actors
            wrapping deploy/workers.py) -> tokens back the same way, as SSE or one JSON body.

Files: ``config.py`` (typed builder args, runtime knobs), ``app.py`` (``build_app``, the
configs' import path), ``protocol.py`` (OpenAI request bodies, error body), ``responses.py``
(OpenAI response bodies), ``local.yaml`` / ``config.yaml`` (``serve run`` configs),
``workers.py`` (the in-process model workers), ``local_engine.py`` (in-process wiring).

Design: child actors, one engine replica, plain actor calls
------------------------------------------------------------
The draft and the target each live in a Ray actor that the engine replica creates (child
actors; ``num_gpus`` per actor, so on a GPU node they land on different GPUs). The
alternative, separate Serve deployments, would put a ``DeploymentHandle`` call (router,
queue-length probing, at least one actor call's cost) on every step; child actors are
called directly. The engine loop runs next to the scheduler in the engine replica, so the
per-step path is exactly the engine's model calls:

* decode step: ``draft.propose`` then ``target.verify``: 2 hops (1 with speculation off);
* admission step: ``target.prefill`` adds 1 hop; ``free`` is fire-and-forget (0 hops:
  calls from one caller to a sequential actor run in order).

Measured per-hop Ray overhead (round trip minus in-actor compute, from ``GET /stats``;
``bench/serve.py``, results in ``bench/results/serve-cpu.json``) on this shared 2-core CPU
under load: propose 3.2-3.4 ms p50 (7-14 ms p99), verify 2.6-2.9 ms p50 (~5 ms p99); the
issue's idle reference is 1.3 ms p50. That is ~6 ms per speculative step against ~250-300
ms of CPU compute per step (~2 %). On GPUs, where a step of a small model is a few ms, the
two hops (2.3-2.7 ms p50 measured on an H200 host) matter; the next step is a Ray Compiled
Graph for the draft -> target chain (0.68 ms p50 for both hops on H200), which needs a
fused propose+verify call in the engine protocol (``scheduler/``), or overlapping the next
step's propose with this step's verify.

Ingress -> engine costs one streaming handle message per engine event (per request per
step), which is off the model actors' critical path.
"""
