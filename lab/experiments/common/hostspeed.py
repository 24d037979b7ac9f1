"""Timing step methods with the host-speed index, and recording what the host's CPU speed did to them.

`timed` is the lab's one way to time step methods that keep a host index (lab.experiments.common.methods, inductor):
rotating rounds (lab.measure.timing.rotating_rounds), each turn between two samples of the index, each method's
`step_ms` with its interval from the rounds, then `record`.

Beside each method's `round_medians_ms`: `host_index_ms`, the index of each of its rounds (lab.measure.hostspeed);
per method `host_sensitivity` with its interval and `step_ms_at_reference` with its interval; per method but eager
`speedup_at_reference` beside the observed `speedup_vs_eager`; per shape the reference itself
(`host_index_reference_ms`) and the index's cost (`host_index_cost`); and the raw samples in the `host_index.{shape}`
note. The statistics are lab.contract.hostspeed's. An experiment records only what its catalogue entry declares.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

from lab.contract import hostspeed as stats
from lab.contract import metrics as M
from lab.contract import notes
from lab.contract.hostspeed import Estimate
from lab.contract.names import Method, Param as P
from lab.contract.results import Spread
from lab.measure.hostspeed import HostIndex
from lab.measure.timing import rotating_rounds

Turns = dict[str, tuple[dict[str, Any], Callable[[], list[float]]]]


def timed(ctx: Any, turns: Turns, rounds: int, params: dict[str, Any],
          note_shape: str) -> dict[str, tuple[list[list[float]], Spread]]:
    """Per name (the index keeps its turns under it): the method's per-round samples and its `step_ms` recorded under
    the params given with its turn. The speedup at the reference of each method is taken against eager's turn of the
    same other params. `params`, `note_shape`: the timing's, as `record` takes them."""
    index = HostIndex()
    samples = rotating_rounds({name: fn for name, (_, fn) in turns.items()}, rounds, index=index)
    spreads = {name: ctx.timing(M.STEP_MS, samples[name], **p) for name, (p, _) in turns.items()}

    def rest(p: dict[str, Any]) -> str:
        return repr({k: v for k, v in p.items() if k != P.METHOD})

    eager = {rest(p): name for name, (p, _) in turns.items() if p[P.METHOD] == Method.EAGER}
    speedups = [(eager[rest(p)], name) for name, (p, _) in turns.items()
                if p[P.METHOD] != Method.EAGER and rest(p) in eager]
    record(ctx, params, note_shape, {name: (p, samples[name]) for name, (p, _) in turns.items()}, index, speedups)
    return {name: (samples[name], spreads[name]) for name in turns}


def host_warning(ctx: Any, text: str) -> None:
    """A warning about the host (what it did, measured), kept in the record's `host_warnings` note: never a check."""
    ctx.note(notes.HOST_WARNINGS.key, [*ctx.record.notes.get(notes.HOST_WARNINGS.key, []), text])
    ctx.progress(f"host warning: {text}")


def put(ctx: Any, spec: M.MetricSpec, est: Estimate | None, digits: int, **params: Any) -> None:
    """`spec` and its interval's two ends, where the experiment declares it (None where nothing could be fitted)."""
    if spec not in ctx.spec.metrics or spec.interval is None:
        return
    low, high = (M.REGISTRY[n] for n in spec.interval)
    ci = None if est is None else est.interval
    values = (None, None, None) if est is None else (est.value, *((None, None) if ci is None else (ci.low, ci.high)))
    ctx.metrics({s: None if v is None else round(v, digits) for s, v in zip((spec, low, high), values)}, **params)


def record(ctx: Any, params: dict[str, Any], note_shape: str, turns: dict[str, tuple[dict[str, Any], list[list[float]]]],
           index: HostIndex, speedups: list[tuple[str, str]]) -> None:
    """Record the index and its statistics of one timing. `params`: the timing's (the cost and the reference carry
    them); `turns`: per name the index kept its turns under, the params of that method's metrics and its per-round
    step times; `speedups`: (baseline's name, method's name) pairs whose speedup at the reference is recorded under
    the method's params."""
    if M.HOST_INDEX_MS not in ctx.spec.metrics:
        return
    reference = stats.reference_index(index.all_rounds())
    cost = index.cost()
    ctx.metrics({M.HOST_INDEX_COST: None if cost is None else round(cost, 5),
                 M.HOST_INDEX_REFERENCE_MS: None if reference is None else round(reference, 5)}, **params)
    ctx.note(notes.HOST_INDEX.key_for(shape=note_shape), index.note())
    fitted: dict[str, tuple[list[float], list[float]]] = {}
    for name, (p, per_round) in turns.items():
        idx = index.per_round(name)
        medians = [statistics.median(r) for r in per_round]
        fitted[name] = (idx, medians)
        ctx.metric(M.HOST_INDEX_MS, idx, **p)
        put(ctx, M.HOST_SENSITIVITY, stats.sensitivity(idx, medians), 4, **p)
        at_ref = None if reference is None else stats.at_reference(idx, medians, reference)
        put(ctx, M.STEP_MS_AT_REFERENCE, at_ref, 5, **p)
    for base, name in speedups:
        if base in fitted and name in fitted:
            speedup = None if reference is None else stats.speedup_at_reference(fitted[base], fitted[name], reference)
            put(ctx, M.SPEEDUP_AT_REFERENCE, speedup, 4, **turns[name][0])
