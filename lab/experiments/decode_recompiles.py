"""decode_recompiles: the growing-cache step against the fixed-shape step, each compiled and called N times.

The growing step's cache gets one slot longer every call and its position is a Python int, so a
guard fails every call; the fixed step keeps every shape and reads the position from a device
buffer, so it compiles once. Counted with CountingBackend (graphs run eagerly, no compiler needed).
Compiled by hand, not through the method table: what is measured is the compiles under each `dynamic` setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch._dynamo.utils import counters

from lab.console import plural
from lab.step import decode
from lab.contract import metrics as M
from lab.measure.dynamo_tools import CountingBackend, explain, limit_hit, quiet_dynamo, recompile_reasons
from lab.contract import notes as N
from lab.experiments.common.sweep import prompt_for
from lab.contract.options import option
from lab.run.context import Context


@dataclass(frozen=True)
class Options:
    calls: int = option(20, "calls of each compiled step", minimum=1)


def _measure(label: str, ctx: Context[Options], call: Callable[..., Any], calls: int, dynamic: bool | None = None) -> CountingBackend:
    torch._dynamo.reset()
    counters.clear()
    backend = CountingBackend()
    with recompile_reasons() as reasons, quiet_dynamo(), torch.no_grad():
        call(backend, calls, dynamic)
    frames = dict(counters.get("frames", {}))
    compiles = int(frames.get("ok", backend.graph_count))
    hit = limit_hit({k: dict(v) for k, v in counters.items()})
    mode = {None: "automatic", False: "False", True: "True"}[dynamic]
    ctx.metrics({M.COMPILES: compiles, M.GRAPHS: backend.graph_count}, step=label, dynamic=mode, calls=calls)
    ctx.metrics({M.LIMIT_HIT: hit, M.OP_NODES_FIRST_GRAPH: backend.graphs[0].call_nodes if backend.graphs else 0,
                 M.SYMBOLIC_GRAPHS: sum(g.symbolic for g in backend.graphs)}, step=label, dynamic=mode)
    ctx.note(N.STEP_RECOMPILE_REASONS.key_for(label, mode), [r.splitlines()[-1].strip() for r in reasons][:6])
    ctx.progress(f"{label} (dynamic={mode}): {plural(compiles, 'compile')}, {plural(backend.graph_count, 'graph')}, "
                 f"limit hit: {hit}")
    return backend


def run(ctx: Context[Options]) -> None:
    calls = ctx.options.calls
    _, w = ctx.gpt2()
    prompt = prompt_for(ctx.profile.model.vocab_size, 1, ctx.profile.prompt_len, ctx.device, 1)
    max_len = ctx.profile.prompt_len + calls + 2

    def growing(backend: CountingBackend, n: int, dynamic: bool | None) -> None:
        logits, past = decode.growing_prefill(w, prompt)
        tok = logits.argmax(-1, keepdim=True)
        step = torch.compile(decode.growing_step, backend=backend, dynamic=dynamic)
        pos = prompt.shape[1]
        for _ in range(n):
            logits, past = step(tok, pos, past, w)
            tok = logits.argmax(-1, keepdim=True)
            pos += 1

    def fixed(backend: CountingBackend, n: int, dynamic: bool | None) -> None:
        state = decode.prefilled(w, prompt, max_len)
        step = torch.compile(decode.decode_step, backend=backend, dynamic=dynamic)
        for _ in range(n):
            step(state, w)

    # Automatic dynamic shapes (the default) can turn the growing length and the int position into
    # symbols after the first recompile; dynamic=False shows the one-compile-per-call cliff.
    _measure("growing", ctx, growing, calls, None)
    _measure("growing", ctx, growing, calls, False)
    _measure("fixed", ctx, fixed, calls, None)
    _measure("fixed", ctx, fixed, calls, False)

    # Graph breaks and explain's own op count for one call of each step.
    state = decode.prefilled(w, prompt, max_len)
    with torch.no_grad():
        e_fixed = explain(decode.decode_step, state, w)
        logits, past = decode.growing_prefill(w, prompt)
        e_grow = explain(decode.growing_step, logits.argmax(-1, keepdim=True), prompt.shape[1], past, w)
    for label, e in (("fixed", e_fixed), ("growing", e_grow)):
        ctx.metrics({M.GRAPH_BREAKS: e.breaks, M.EXPLAIN_OPS: e.ops}, step=label)
        ctx.note(N.STEP_BREAK_REASONS.key_for(label), e.reasons)
    for mode in ("automatic", "False"):
        fixed_compiles = ctx.record.metric(M.COMPILES.name, step="fixed", dynamic=mode).value
        fixed_graphs = ctx.record.metric(M.GRAPHS.name, step="fixed", dynamic=mode).value
        ctx.check(f"fixed step (dynamic={mode}): one compile, one graph, no break",
                  fixed_compiles == 1 and fixed_graphs == 1 and e_fixed.breaks == 0,
                  detail=f"{fixed_compiles} compiles, {fixed_graphs} graphs, {e_fixed.breaks} breaks")
        grow_compiles = ctx.record.metric(M.COMPILES.name, step="growing", dynamic=mode).value
        ctx.check(f"growing step (dynamic={mode}) recompiles", grow_compiles > 1, detail=f"{grow_compiles} compiles",
                  fatal=False)
