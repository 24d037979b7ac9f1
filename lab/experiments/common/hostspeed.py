"""Recording what the host's CPU speed did to one shape's timing of step methods (lab.experiments.common.methods).

Beside each method's `round_medians_ms`: `host_index_ms`, the index of each of its rounds (lab.measure.hostspeed);
per method `host_sensitivity` with its interval and `step_ms_at_reference` with its interval; per method but eager
`speedup_at_reference` beside the observed `speedup_vs_eager`; per shape the reference itself
(`host_index_reference_ms`) and the index's cost (`host_index_cost`); and the raw samples in the `host_index.{shape}`
note. The statistics are lab.contract.hostspeed's. An experiment records only what its catalogue entry declares.
"""

from __future__ import annotations

import statistics
from typing import Any

from lab.contract import hostspeed as stats
from lab.contract import metrics as M
from lab.contract import notes
from lab.contract.hostspeed import Estimate
from lab.contract.names import Method
from lab.measure.hostspeed import HostIndex


def _put(ctx: Any, spec: M.MetricSpec, est: Estimate | None, digits: int, **params: Any) -> None:
    if spec not in ctx.spec.metrics or spec.interval is None:
        return
    low, high = (M.REGISTRY[n] for n in spec.interval)
    ci = None if est is None else est.interval
    ctx.metric(spec, None if est is None else round(est.value, digits), **params)
    ctx.metric(low, None if ci is None else round(ci.low, digits), **params)
    ctx.metric(high, None if ci is None else round(ci.high, digits), **params)


def record(ctx: Any, params: dict[str, Any], note_shape: str, samples: dict[str, list[list[float]]],
           index: HostIndex, readback_param: bool) -> None:
    """Record the index and its statistics for `samples` ("method|readback" -> per-round step times)."""
    if M.HOST_INDEX_MS not in ctx.spec.metrics:
        return
    reference = stats.reference_index(index.all_rounds())
    cost = index.cost()
    ctx.metric(M.HOST_INDEX_COST, None if cost is None else round(cost, 5), **params)
    ctx.metric(M.HOST_INDEX_REFERENCE_MS, None if reference is None else round(reference, 5), **params)
    ctx.note(notes.HOST_INDEX.key_for(shape=note_shape), index.note())
    fitted: dict[tuple[str, bool], tuple[list[float], list[float]]] = {}
    for key, per_round in samples.items():
        name, rb_text = key.split("|")
        rb = rb_text == "True"
        extra = {"readback": rb} if readback_param else {}
        idx = index.per_round(key)
        medians = [statistics.median(r) for r in per_round]
        fitted[(name, rb)] = (idx, medians)
        ctx.metric(M.HOST_INDEX_MS, idx, **params, method=name, **extra)
        _put(ctx, M.HOST_SENSITIVITY, stats.sensitivity(idx, medians), 4, **params, method=name, **extra)
        at_ref = None if reference is None else stats.at_reference(idx, medians, reference)
        _put(ctx, M.STEP_MS_AT_REFERENCE, at_ref, 5, **params, method=name, **extra)
    for (name, rb), pair in fitted.items():
        eager = fitted.get((Method.EAGER, rb))
        if eager is None or name == Method.EAGER:
            continue
        extra = {"readback": rb} if readback_param else {}
        speedup = None if reference is None else stats.speedup_at_reference(eager, pair, reference)
        _put(ctx, M.SPEEDUP_AT_REFERENCE, speedup, 4, **params, method=name, **extra)
