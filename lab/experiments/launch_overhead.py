"""launch_overhead: many tiny ops at batch 1, eager vs graph replay vs compiled (vs compile+graph).

Each op touches 64 floats, so its arithmetic costs nothing: eager time is the fixed cost per op
(Python, dispatcher, and on a GPU the kernel launch). Graph replay keeps the same kernels and drops
the host work per op; compile fuses them into a few kernels; compile+graph does both. The µs per
op removed is (eager − method) / ops. Graph parts need CUDA and are listed as skipped elsewhere.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from lab.bench import COMPILE_GRAPH, COMPILED, EAGER, GRAPH, compile_first_call, cuda_skip, inductor_skip, time_methods
from lab.dynamo_tools import quiet_dynamo
from lab.opprofile import profile_step


def make_tiny_chain(n_ops: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def tiny_chain(x: torch.Tensor) -> torch.Tensor:
        for i in range(n_ops // 2):  # two ops per iteration
            x = (x * 0.999) + 0.001 * (i % 3)
        return x

    return tiny_chain


def run(ctx) -> None:
    dev = ctx.device
    n_ops = int(ctx.opt("n_ops", 100))
    n_ops -= n_ops % 2
    width = int(ctx.opt("width", 64))
    fn = make_tiny_chain(n_ops)
    x = torch.randn(1, width, device=dev)
    ctx.note("shape", [1, width])
    methods: dict[str, Callable[[], Any]] = {EAGER: lambda: fn(x)}
    compiled = None
    if not inductor_skip(ctx, f"{COMPILED} and {COMPILE_GRAPH}"):
        torch._dynamo.reset()
        with quiet_dynamo():
            compiled = compile_first_call(fn, (x,), dev, dynamic=False)
        ctx.metric("setup_s", round(compiled.setup_s, 3), "s", method=COMPILED)
        methods[COMPILED] = lambda: compiled.fn(x)
    if not cuda_skip(ctx, f"{GRAPH} and {COMPILE_GRAPH}"):
        from lab.replay import StaticGraph

        g = StaticGraph(fn, (x,))
        ctx.metric("setup_s", round(g.setup_s, 3), "s", method=GRAPH)
        methods[GRAPH] = g.replay  # static input already holds x: replay alone is the step
        if compiled is not None:
            cg = StaticGraph(compiled.fn, (x,))
            ctx.metric("setup_s", round(cg.setup_s, 3), "s", method=COMPILE_GRAPH)
            methods[COMPILE_GRAPH] = cg.replay
    with torch.no_grad():
        ref = fn(x)
        for method, f in methods.items():
            out = f()
            ctx.check(f"{method} equals eager", torch.allclose(out, ref, rtol=1e-5, atol=1e-6), method=method)
        for method in (EAGER, COMPILED):
            if method in methods:
                prof = profile_step(methods[method], dev, steps=3, warmup=1)
                ctx.metric("ops_per_step", prof.kernels, "count", method=method)
        samples = time_methods(methods, ctx.clock, rounds=ctx.profile.rounds, iters=int(ctx.opt("iters", 30)),
                               warmup=ctx.profile.warmup)
    ms = {m: ctx.timing("step_ms", xs, "ms", method=m, n_ops=n_ops).median for m, xs in samples.items()}
    for m, v in ms.items():
        ctx.metric("us_per_op", v * 1e3 / n_ops, "us", method=m)
        if m != EAGER:
            ctx.metric("us_per_op_removed", (ms[EAGER] - v) * 1e3 / n_ops, "us", method=m)
            ctx.metric("speedup", ms[EAGER] / v, "x", method=m)
    torch._dynamo.reset()
