"""One CUDA graph capture, the lab's only one: side-stream warm-up, capture, and what they cost.

The recipe of PyTorch's CUDA Graphs notes, written once:
1. warm up on a side stream: the first calls do lazy work (cuBLAS handles, Triton autotuning and
   loading, allocator growth) that must not happen inside a capture, and the side stream keeps
   those calls off the stream whose work the capture must not depend on;
2. capture one call into a `torch.cuda.CUDAGraph`: the kernels are recorded, not run, against the
   addresses the call touched; the tensors the captured call returns are the graph's output
   buffers, which every replay overwrites;
3. replay: `graph.replay()` launches the whole recording at once.

Warm-up and capture each run once, synchronised before and after and timed on the host
(`lab.measure.timing.first_call`); `pool_bytes` is the memory they made the caching allocator reserve (the
graph's private pool, plus whatever the warm-up grew).

Used by `GraphedStep` (lab.step.graphs: the decode step), `StaticGraph` (lab.step.replay: the manual recipe
with checked inputs) and the ceilings' graph-node launch cost (lab.step.ceilings). Nothing else in lab/
calls `torch.cuda.graph`; a test greps for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from lab.measure.timing import first_call


@dataclass
class Capture:
    """A captured call: its graph, its output buffers, and the one-off costs of getting there."""

    graph: Any  # torch.cuda.CUDAGraph
    output: Any  # what the captured call returned: overwritten by every replay
    warmup_s: float  # the side-stream warm-up calls
    capture_s: float  # the capture alone
    pool_bytes: int  # memory reserved by warm-up and capture together

    @property
    def setup_s(self) -> float:
        """Warm-up + capture: what a user pays before the first replay."""
        return self.warmup_s + self.capture_s

    def replay(self) -> Any:
        """Launch the recording once; returns the output buffers (not a copy)."""
        self.graph.replay()
        return self.output


def _warm_up(fn: Callable[..., Any], args: tuple[Any, ...], calls: int) -> None:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(calls):
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)


def _record(graph: Any, fn: Callable[..., Any], args: tuple[Any, ...], pool: Any,
            capture_error_mode: str | None) -> Any:
    kwargs: dict[str, Any] = {"capture_error_mode": capture_error_mode} if capture_error_mode else {}
    with torch.cuda.graph(graph, pool=pool, **kwargs):
        return fn(*args)  # recorded, not executed


def capture(fn: Callable[..., Any], *args: Any, warmup: int = 3, pool: Any = None,
            capture_error_mode: str | None = None) -> Capture:
    """Warm `fn(*args)` up `warmup` times on a side stream, then capture one call (under no_grad).

    The graph records addresses, not references: the caller keeps every tensor `fn` reads or writes (and `fn`, where
    it is a closure over them) alive for as long as it replays the graph (lab.experiments.fused_anatomy once did not,
    and read freed memory).

    `pool`: a memory pool to share with other graphs (`torch.cuda.graph_pool_handle()` or another
    graph's `.pool()`); `capture_error_mode`: torch.cuda.graph's ("global", "thread_local",
    "relaxed"; None leaves its default). The caller restores any state the calls advanced.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("CUDA graph capture needs a CUDA device")
    torch.cuda.synchronize()
    reserved = torch.cuda.memory_reserved()
    with torch.no_grad():
        _, warmup_s = first_call(_warm_up, fn, args, warmup, device="cuda")
        graph = torch.cuda.CUDAGraph()
        output, capture_s = first_call(_record, graph, fn, args, pool, capture_error_mode, device="cuda")
    return Capture(graph=graph, output=output, warmup_s=warmup_s, capture_s=capture_s,
                   pool_bytes=torch.cuda.memory_reserved() - reserved)
