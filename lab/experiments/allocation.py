"""allocation: what one intermediate tensor costs the allocator, and what planning removes.

The same K elementwise ops three ways: `allocating` (each op returns a fresh tensor, as eager code
does), `planned` (each op writes into one of two buffers allocated once, as a memory planner would
arrange from known lifetimes), and `in-place` (no output at all). (allocating − planned) / K is the
cost per intermediate the planner removes. On CUDA the caching allocator's own counters say how
many allocations a step made; `compiled` (Inductor) is timed too, where a fused chain has no
intermediates left at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from lab.contract import metrics as M
from lab.experiments.common.sweep import inductor_skip
from lab.measure.timing import compile_first_call, flat, time_methods
from lab.contract import notes as N
from lab.contract.names import Method, Variant
from lab.contract.options import option
from lab.run.context import Context

ALLOCATING, PLANNED, IN_PLACE = Variant.ALLOCATING, Variant.PLANNED, Variant.IN_PLACE


@dataclass(frozen=True)
class Options:
    k: int = option(64, "elementwise ops per call (intermediate tensors of the allocating version)", minimum=1)
    numel: int = option(256, "elements of each tensor", minimum=1)
    iters: int = option(30, "timed calls per round", minimum=1)


def allocating(x: torch.Tensor, k: int) -> torch.Tensor:
    for _ in range(k):
        x = torch.add(x, 1.0)
    return x


def planned(x: torch.Tensor, k: int, bufs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    src = x
    for i in range(k):
        dst = bufs[i % 2]
        torch.add(src, 1.0, out=dst)
        src = dst
    return src


def in_place(x: torch.Tensor, k: int, buf: torch.Tensor) -> torch.Tensor:
    buf.copy_(x)
    for _ in range(k - 1):
        buf.add_(1.0)
    return buf.add_(1.0)


def allocations_per_call(f: Callable[[], Any], calls: int = 10) -> float | None:
    """CUDA caching-allocator allocations per call (None on the CPU: no counter there)."""
    if not torch.cuda.is_available() or torch.cuda.memory_stats() is None:
        return None
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
    for _ in range(calls):
        f()
    torch.cuda.synchronize()
    return float(torch.cuda.memory_stats().get("allocation.all.allocated", 0) - before) / calls


def run(ctx: Context[Options]) -> None:
    dev = ctx.device
    k, numel = ctx.options.k, ctx.options.numel
    x = torch.randn(numel, device=dev)
    bufs = (torch.empty_like(x), torch.empty_like(x))
    buf = torch.empty_like(x)
    methods: dict[str, Callable[[], Any]] = {
        ALLOCATING: lambda: allocating(x, k), PLANNED: lambda: planned(x, k, bufs), IN_PLACE: lambda: in_place(x, k, buf),
    }
    if not inductor_skip(ctx, Method.COMPILE_DEFAULT):
        c = compile_first_call(allocating, (x, k), dev, reset=True, dynamic=False)
        ctx.metric(M.SETUP_S, round(c.setup_s, 3), method=Method.COMPILE_DEFAULT)
        methods[Method.COMPILE_DEFAULT] = lambda: c.fn(x, k)
    with torch.no_grad():
        ref = allocating(x, k).clone()
        for m, f in methods.items():
            ctx.check(f"{m} equals allocating", torch.allclose(f(), ref, rtol=1e-5, atol=1e-5), method=m)
            if dev.type == "cuda":
                ctx.metric(M.ALLOCATIONS_PER_STEP, allocations_per_call(f), method=m)
        samples = time_methods(methods, ctx.clock, ctx.profile.rounds, ctx.options.iters, ctx.profile.warmup)
    ms = {m: ctx.timing(M.STEP_MS, flat(xs), method=m, k=k, numel=numel).median for m, xs in samples.items()}
    if dev.type != "cuda":
        ctx.note(N.ALLOCATIONS.key, {ALLOCATING: k, PLANNED: 0, IN_PLACE: 0,
                                          "why": "by construction: the CPU allocator keeps no counter"})
    ctx.metric(M.US_PER_INTERMEDIATE, (ms[ALLOCATING] - ms[PLANNED]) * 1e3 / k, removed_by=PLANNED)
    ctx.metric(M.US_PER_INTERMEDIATE, (ms[ALLOCATING] - ms[IN_PLACE]) * 1e3 / k, removed_by=IN_PLACE)
    # A direct probe of the allocator: allocate and free one tensor of the same size.
    with torch.no_grad():
        empty = flat(time_methods({"empty": lambda: [torch.empty(numel, device=dev) for _ in range(k)]}, ctx.clock,
                                  ctx.profile.rounds, ctx.options.iters)["empty"])
    ctx.timing(M.EMPTY_MS, empty, k=k, numel=numel)
    ctx.metric(M.US_PER_EMPTY, sorted(empty)[len(empty) // 2] * 1e3 / k)
    torch._dynamo.reset()
