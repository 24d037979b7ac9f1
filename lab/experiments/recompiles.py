"""recompiles: one function called with 12 batch sizes under dynamic=False, automatic (None) and True.

Counts compiles with CountingBackend (no compiler needed), whether Dynamo hit its recompile limit
(read under the installed version's own name), and the input shapes of each graph: a graph whose
batch is a number was specialised, one whose batch is a symbol serves many sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lab.contract import metrics as M
from lab.console import plural
from lab.measure.dynamo_tools import count_compiles, recompile_limit
from lab.contract import notes as N
from lab.contract.options import option
from lab.run.context import Context

MODES = {"False": False, "automatic": None, "True": True}


def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.nn.functional.gelu(x @ w)
    return torch.nn.functional.layer_norm(h + x, (x.shape[-1],))


@dataclass(frozen=True)
class Options:
    batch_sizes: tuple[int, ...] = option(tuple(range(1, 13)), "the batch sizes the function is called with, in order",
                                          minimum=1)


def run(ctx: Context[Options]) -> None:
    sizes = list(ctx.options.batch_sizes)
    limit_name, limit_value = recompile_limit()
    ctx.metric(M.RECOMPILE_LIMIT, limit_value, name=f"torch._dynamo.config.{limit_name}")
    ctx.note(N.RECOMPILE_LIMIT_NAME.key, f"torch._dynamo.config.{limit_name}")
    ctx.note(N.BATCH_SIZES.key, sizes)
    w = torch.randn(32, 32, device=ctx.device)
    calls = [(torch.randn(b, 32, device=ctx.device), w) for b in sizes]
    for label, dynamic in MODES.items():
        c = count_compiles(block, calls, dynamic=dynamic)
        ctx.metrics({M.COMPILES: c.compiles, M.GRAPHS: c.graphs, M.SYMBOLIC_GRAPHS: c.symbolic_graphs,
                     M.LIMIT_HIT: c.limit_hit}, dynamic=label)
        ctx.note(N.GRAPH_INPUT_SHAPES.key_for(label), c.graph_shapes)
        ctx.note(N.RECOMPILE_REASONS.key_for(label), [r.splitlines()[-1].strip() for r in c.reasons][:12])
        ctx.progress(f"dynamic={label}: {plural(c.compiles, 'compile')}, limit hit: {c.limit_hit}")
    # What the numbers mean, as checks a reader can follow (not fatal: they are facts of this torch).
    false_compiles = ctx.record.metric(M.COMPILES.name, dynamic="False").value
    ctx.check("dynamic=False compiles once per size until the limit",
              false_compiles == min(len(sizes), limit_value), detail=f"{false_compiles} compiles", fatal=False)
