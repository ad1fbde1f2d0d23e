"""CUDA graphs of model steps, one per (bucket batch size, tokens per row).

A step's shapes depend only on (bucket, T), its inputs are three small integer tensors and
the KV cache is static, so each (bucket, T) is captured once and replayed with the inputs
copied into static buffers. ``ModelRunner`` pads every batch to its bucket and calls
``replay``; shapes that were not captured (prefill) run eagerly.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from models.runner import BUCKETS, ModelRunner


class _Graph:
    def __init__(self, runner: ModelRunner, batch: int, t: int, pool):
        dev = runner.device
        self.tokens = torch.zeros(batch, t, dtype=torch.long, device=dev)
        self.slots = torch.full((batch,), runner.scratch, dtype=torch.long, device=dev)
        self.positions = torch.zeros(batch, dtype=torch.long, device=dev)
        # A ring of pinned staging buffers: a buffer is rewritten only after the copy that
        # last read it has run (its event), so no step waits for the device.
        self.staging = [torch.zeros(2 * batch + batch * t, dtype=torch.long).pin_memory()
                        for _ in range(4)]
        self.copied = [torch.cuda.Event() for _ in range(4)]
        self.turn = 0
        run = lambda: runner.model(self.tokens, self.slots, self.positions, runner.caches)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.inference_mode():
            for _ in range(2):  # warm up kernels and allocator outside the capture
                run()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool), torch.inference_mode():
            self.logits = run()

    def replay(self, tokens: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor):
        b, t = tokens.shape
        i = self.turn = (self.turn + 1) % len(self.staging)
        host = self.staging[i]
        self.copied[i].synchronize()  # long done: it was recorded several steps ago
        host[:b].copy_(slots)
        host[b:2 * b].copy_(positions)
        host[2 * b:].copy_(tokens.reshape(-1))
        dev = host.to(self.tokens.device, non_blocking=True)
        self.copied[i].record()
        self.slots.copy_(dev[:b])
        self.positions.copy_(dev[b:2 * b])
        self.tokens.copy_(dev[2 * b:].view(b, t))
        self.graph.replay()
        return self.logits.clone()


class GraphRunner:
    """Captures and replays the steps of one ``ModelRunner``."""

    def __init__(self, runner: ModelRunner, tokens_per_row: Iterable[int] = (1,),
                 max_batch: int | None = None):
        if runner.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self.runner = runner
        top = max_batch or runner.max_slots
        sizes = [b for b in BUCKETS if b <= top] or [top]
        if top not in sizes and top > sizes[-1]:
            sizes.append(top)
        pool = torch.cuda.graph_pool_handle()
        self.graphs = {(b, t): _Graph(runner, b, t, pool)
                       for t in sorted(set(tokens_per_row)) for b in reversed(sizes)}
        runner.graphs = self

    def replay(self, tokens: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor):
        """Logits ``[bucket, T, V]`` from the captured step, or None if not captured."""
        b, t = tokens.shape
        graph = self.graphs.get((b, t))
        return None if graph is None else graph.replay(tokens, slots, positions)
