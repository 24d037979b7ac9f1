"""launch_overhead: many tiny ops at batch 1, eager vs graph replay vs compiled (vs compile+graph).

Each op touches 64 floats, so its arithmetic costs nothing: eager time is the fixed cost per op
(Python, dispatcher, and on a GPU the kernel launch). Graph replay keeps the same kernels and drops
the host work per op; compile fuses them into a few kernels; compile+graph does both. The µs per
op removed is (eager − method) / ops. Graph parts need CUDA and are listed as skipped elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from lab.contract import metrics as M
from lab.experiments.common.sweep import cuda_skip, inductor_skip
from lab.measure.timing import compile_first_call, time_methods
from lab.contract import notes as N
from lab.contract.names import Method
from lab.measure.opprofile import profile_step
from lab.contract.options import option
from lab.run.context import Context


@dataclass(frozen=True)
class Options:
    n_ops: int = option(100, "tiny ops per call (rounded down to an even number)", minimum=1)
    width: int = option(64, "floats each op touches", minimum=1)
    iters: int = option(30, "timed calls per round", minimum=1)


def make_tiny_chain(n_ops: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def tiny_chain(x: torch.Tensor) -> torch.Tensor:
        for i in range(n_ops // 2):  # two ops per iteration
            x = (x * 0.999) + 0.001 * (i % 3)
        return x

    return tiny_chain


def run(ctx: Context[Options]) -> None:
    dev = ctx.device
    n_ops = ctx.options.n_ops - ctx.options.n_ops % 2
    width = ctx.options.width
    fn = make_tiny_chain(n_ops)
    x = torch.randn(1, width, device=dev)
    ctx.note(N.SHAPE.key, [1, width])
    methods: dict[str, Callable[[], Any]] = {Method.EAGER: lambda: fn(x)}
    compiled = None
    if not inductor_skip(ctx, f"{Method.COMPILE_DEFAULT} and {Method.COMPILE_GRAPH}"):
        compiled = compile_first_call(fn, (x,), dev, reset=True, dynamic=False)
        ctx.metric(M.SETUP_S, round(compiled.setup_s, 3), method=Method.COMPILE_DEFAULT)
        methods[Method.COMPILE_DEFAULT] = lambda: compiled.fn(x)
    if not cuda_skip(ctx, f"{Method.GRAPH} and {Method.COMPILE_GRAPH}"):
        from lab.step.replay import StaticGraph

        g = StaticGraph(fn, (x,))
        ctx.metric(M.SETUP_S, round(g.setup_s, 3), method=Method.GRAPH)
        methods[Method.GRAPH] = g.replay  # static input already holds x: replay alone is the step
        if compiled is not None:
            cg = StaticGraph(compiled.fn, (x,))
            ctx.metric(M.SETUP_S, round(cg.setup_s, 3), method=Method.COMPILE_GRAPH)
            methods[Method.COMPILE_GRAPH] = cg.replay
    with torch.no_grad():
        ref = fn(x)
        for method, f in methods.items():
            out = f()
            ctx.check(f"{method} equals eager", torch.allclose(out, ref, rtol=1e-5, atol=1e-6), method=method)
        samples = time_methods(methods, ctx.clock, ctx.profile.rounds, ctx.options.iters, ctx.profile.warmup)
        # the profile after the timing: a profiler session may slow every later launch (lab.measure.profiler_guard)
        for method in (Method.EAGER, Method.COMPILE_DEFAULT):
            if method in methods:
                prof = profile_step(methods[method], dev, steps=3, warmup=1)
                ctx.metric(M.OPS_PER_STEP, prof.kernels, method=method)
    ms = {m: ctx.timing(M.STEP_MS, xs, method=m, n_ops=n_ops).median for m, xs in samples.items()}
    for m, v in ms.items():
        ctx.metric(M.US_PER_OP, v * 1e3 / n_ops, method=m)
        if m != Method.EAGER:
            ctx.metric(M.US_PER_OP_REMOVED, (ms[Method.EAGER] - v) * 1e3 / n_ops, method=m)
            ctx.speedup(M.SPEEDUP, samples[Method.EAGER], samples[m], method=m)
    torch._dynamo.reset()
