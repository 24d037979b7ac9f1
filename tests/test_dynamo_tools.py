"""Counting graphs, breaks and recompilations with the installed torch (no compiler needed)."""

from __future__ import annotations

import pytest
import torch

from lab.step import decode
from lab.measure.dynamo_tools import CountingBackend, count_compiles, explain, recompile_limit
from lab.experiments import graph_breaks


def test_recompile_limit_is_read_from_torch() -> None:
    import torch._dynamo.config as cfg

    name, value = recompile_limit()
    assert name in ("recompile_limit", "cache_size_limit")
    assert getattr(cfg, name) == value and value > 0


def test_each_break_gives_two_graphs() -> None:
    x = torch.randn(4, 8)
    assert (explain(graph_breaks.control, x).graphs, explain(graph_breaks.control, x).breaks) == (1, 0)
    for fn in (graph_breaks.uses_item, graph_breaks.data_dependent_if, graph_breaks.unsupported_call):
        e = explain(fn, x)
        assert e.breaks == 1 and e.graphs == 2, (fn.__name__, e)
        assert e.reasons


def test_static_shapes_hit_the_limit_and_dynamic_does_not() -> None:
    _, limit = recompile_limit()
    calls = [(torch.randn(b, 8),) for b in range(1, 13)]
    static = count_compiles(lambda x: torch.relu(x) * 2, calls, dynamic=False)
    assert static.compiles == limit and static.limit_hit
    assert static.reasons and "size mismatch" in static.reasons[0]
    dyn = count_compiles(lambda x: torch.relu(x) * 2, calls, dynamic=True)
    assert not dyn.limit_hit and dyn.compiles <= 2 and dyn.symbolic_graphs >= 1


@pytest.mark.slow
def test_fixed_step_compiles_once_growing_step_recompiles(tiny) -> None:
    _, w = tiny
    prompt = torch.randint(0, 512, (1, 8), generator=torch.Generator().manual_seed(0))
    torch._dynamo.reset()
    backend = CountingBackend()
    state = decode.new_state(w, 1, 40)
    decode.prefill(state, w, prompt)
    step = torch.compile(decode.decode_step, backend=backend)
    with torch.no_grad():
        for _ in range(10):
            step(state, w)
    assert backend.graph_count == 1 and backend.call_nodes > 20
    torch._dynamo.reset()
    grow_backend = CountingBackend()
    gstep = torch.compile(decode.growing_step, backend=grow_backend, dynamic=False)
    logits, past = decode.growing_prefill(w, prompt)
    tok, pos = logits.argmax(-1, keepdim=True), 8
    with torch.no_grad():
        for _ in range(5):
            logits, past = gstep(tok, pos, past, w)
            tok, pos = logits.argmax(-1, keepdim=True), pos + 1
    assert grow_backend.graph_count == 5
    torch._dynamo.reset()
