"""recompiles: one function called with 12 batch sizes under dynamic=False, automatic (None) and True.

Counts compiles with CountingBackend (no compiler needed), whether Dynamo hit its recompile limit
(read under the installed version's own name), and the input shapes of each graph: a graph whose
batch is a number was specialised, one whose batch is a symbol serves many sizes.
"""

from __future__ import annotations

import torch

from lab.dynamo_tools import count_compiles, recompile_limit

MODES = {"False": False, "automatic": None, "True": True}


def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.nn.functional.gelu(x @ w)
    return torch.nn.functional.layer_norm(h + x, (x.shape[-1],))


def run(ctx) -> None:
    sizes = list(ctx.opt("batch_sizes", list(range(1, 13))))
    limit_name, limit_value = recompile_limit()
    ctx.metric("recompile_limit", limit_value, "compiles", name=f"torch._dynamo.config.{limit_name}")
    ctx.note("recompile_limit_name", f"torch._dynamo.config.{limit_name}")
    ctx.note("batch_sizes", sizes)
    w = torch.randn(32, 32, device=ctx.device)
    calls = [(torch.randn(b, 32, device=ctx.device), w) for b in sizes]
    for label, dynamic in MODES.items():
        c = count_compiles(block, calls, dynamic=dynamic)
        ctx.metric("compiles", c.compiles, "count", dynamic=label)
        ctx.metric("graphs", c.graphs, "count", dynamic=label)
        ctx.metric("symbolic_graphs", c.symbolic_graphs, "count", dynamic=label)
        ctx.metric("limit_hit", c.limit_hit, "bool", dynamic=label)
        ctx.note(f"graph_input_shapes.{label}", c.graph_shapes)
        ctx.note(f"recompile_reasons.{label}", [r.splitlines()[-1].strip() for r in c.reasons][:12])
        ctx.progress(f"dynamic={label}: {c.compiles} compiles, limit hit: {c.limit_hit}")
    # What the numbers mean, as checks a reader can follow (not fatal: they are facts of this torch).
    false_compiles = ctx.record.metric("compiles", dynamic="False").value
    ctx.check("dynamic=False compiles once per size until the limit",
              false_compiles == min(len(sizes), limit_value), detail=f"{false_compiles} compiles", fatal=False)
