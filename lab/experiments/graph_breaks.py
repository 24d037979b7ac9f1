"""graph_breaks: what stops a graph from forming, counted with torch._dynamo.explain.

Each break is Python needing a value the graph has not computed yet (or a call Dynamo cannot trace):
the graph ends, Python runs, a second graph starts. Expected on the chapter's PyTorch 2.6: every
break gives two graphs; the control function gives one graph and no break.
"""

from __future__ import annotations

import io
import os
from contextlib import redirect_stdout

import torch

from lab.contract import metrics as M
from lab.measure.dynamo_tools import explain
from lab.contract import notes as N
from lab.contract.options import NoOptions
from lab.run.context import Context

Options = NoOptions  # no knobs


def control(x: torch.Tensor) -> torch.Tensor:
    """No break: pure tensor code."""
    y = torch.relu(x * 2 + 1)
    return y * y.sum()


def uses_item(x: torch.Tensor) -> torch.Tensor:
    """`.item()` moves a tensor value into Python."""
    y = x * 2
    s = y.sum().item()
    return y + s


def uses_print(x: torch.Tensor) -> torch.Tensor:
    """Host I/O in the traced region."""
    y = x * 2
    print("step")
    return y + 1


def data_dependent_if(x: torch.Tensor) -> torch.Tensor:
    """A Python branch on a tensor value."""
    y = x * 2
    if y.sum() > 0:
        return y + 1
    return y - 1


def unsupported_call(x: torch.Tensor) -> torch.Tensor:
    """A C builtin Dynamo does not know how to trace."""
    y = x * 2
    os.getpid()
    return y + 1


FUNCTIONS = (control, uses_item, uses_print, data_dependent_if, unsupported_call)


def run(ctx: Context[Options]) -> None:
    x = torch.randn(8, 16, device=ctx.device)
    for fn in FUNCTIONS:
        with redirect_stdout(io.StringIO()):  # uses_print prints while traced and run
            e = explain(fn, x)
        ctx.metrics({M.GRAPHS: e.graphs, M.GRAPH_BREAKS: e.breaks, M.OPS: e.ops}, function=fn.__name__)
        ctx.note(N.FUNCTION_REASONS.key_for(fn.__name__), e.reasons)
        expect_breaks = 0 if fn is control else 1
        ctx.check(f"{fn.__name__}: {expect_breaks} break(s), {expect_breaks + 1} graph(s)",
                  e.breaks == expect_breaks and e.graphs == expect_breaks + 1,
                  detail=f"saw {e.graphs} graphs, {e.breaks} breaks: {e.reasons}", fatal=False, function=fn.__name__)
