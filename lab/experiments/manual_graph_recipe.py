"""manual_graph_recipe: a Linear(256, 256) captured by hand and replayed (CUDA only).

The recipe, step by step (lab.step.replay.StaticGraph): static input buffer; warm-up on a side stream
so lazy initialisation and allocator growth stay out of the capture; capture against the static
addresses; replay that checks shape, dtype and device of every argument before copying anything in;
a clone of the static output so a later replay cannot overwrite a result the caller kept.
Checked outside timing: equal to eager; each wrong argument rejected with the static input
untouched; a kept clone survives the next replay while the static output changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lab.contract import metrics as M
from lab.measure.timing import time_methods
from lab.contract.names import Method, Variant
from lab.contract.options import option
from lab.contract.reasons import Code
from lab.step.replay import StaticGraph
from lab.run.runner import NotRun
from lab.run.context import Context


@dataclass(frozen=True)
class Options:
    warmup: int = option(10, "side-stream warm-up calls before the capture")
    iters: int = option(100, "timed calls per round", minimum=1)


def run(ctx: Context[Options]) -> None:
    if ctx.device.type != "cuda":
        raise NotRun(Code.NO_CUDA, "CUDA graph capture needs a CUDA device: run the gpu profile on a host with an NVIDIA "
                                "GPU and a CUDA build of torch")
    dev = ctx.device
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 256).to(dev).eval()
    example = torch.randn(1, 256, device=dev)
    graphed = StaticGraph(model, (example,), warmup=ctx.options.warmup)
    ctx.metric(M.CAPTURE_S, round(graphed.setup_s, 4))

    with torch.no_grad():
        fresh = torch.randn(1, 256, device=dev)
        replayed = graphed(fresh)
        eager = model(fresh)
        ctx.check("replay equals eager", torch.allclose(replayed, eager, rtol=1e-5, atol=1e-6),
                  detail=f"max diff {float((replayed - eager).abs().max()):.2e}")

        before = graphed.static_in[0].clone()
        wrong = {"shape": torch.randn(2, 256, device=dev), "dtype": fresh.half(), "device": fresh.cpu()}
        for what, bad in wrong.items():
            try:
                graphed(bad)
                rejected, message = False, "accepted"
            except ValueError as exc:
                rejected, message = True, str(exc)
            untouched = torch.equal(graphed.static_in[0], before)
            ctx.check(f"wrong {what} rejected before copying", rejected and untouched, detail=message, wrong=what)

        kept = graphed(fresh)  # a clone
        graphed(torch.randn(1, 256, device=dev))  # the next replay overwrites static_out
        ctx.check("a cloned output survives the next replay", torch.allclose(kept, eager, rtol=1e-5, atol=1e-6)
                  and not torch.allclose(graphed.static_out, eager), fatal=True)

        x = fresh
        samples = time_methods({Method.EAGER: lambda: model(x), Method.GRAPH: lambda: graphed(x),
                                Variant.GRAPH_NO_CLONE: lambda: graphed(x, clone=False)},
                               ctx.clock, ctx.profile.rounds, ctx.options.iters, ctx.profile.warmup)
    for m, xs in samples.items():
        ctx.timing(M.STEP_MS, xs, method=m)
    ctx.speedup(M.SPEEDUP, samples[Method.EAGER], samples[Method.GRAPH], method=Method.GRAPH)
