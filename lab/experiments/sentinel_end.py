"""sentinel_end: the fresh-process step measured again at the end of the run, and the run's baseline judged by it.

The same child as `sentinel` (lab.experiments.sentinel) measures eager and graph replay at batch 1
in fp32 after every other experiment, `sentinel_step_ms` with `when=end`, by the same warm-up rule and drift test
(its `warmup.end` note, its check "the sentinel's rounds were steady (end)"). Then:
- `in_run_over_sentinel` (method eager, and graph): the run's own step (cuda_graph_decode, batch 1,
  fp32, no readback) over the sentinel's at the start. Above 1 + `TOLERANCE`, the run's baseline was
  slowed by the run itself (or the host changed): a failed check the console and the front page show.
- `sentinel_drift`: the sentinel's time at the end over its time at the start; beyond `TOLERANCE`
  either way, the host changed under the run and every comparison across its experiments is suspect.

Why 10%: on an H200 host eager's round medians in a settled fresh process stay within a few percent;
the profiler's residue this guards against was +27-35%; a host busy with other work moves it more.
"""

from __future__ import annotations

from typing import Any

from lab.contract import metrics as M
from lab.contract.names import Method
from lab.contract.results import measured_record
from lab.experiments.sentinel import METHODS, measure, sentinel_ms
from lab.experiments.sentinel import Options as Options  # the same knobs as the start's
from lab.run.context import Context

TOLERANCE = 0.10


def _in_run_ms(records: list[Any], method: str) -> float | None:
    rec, failed = measured_record(records, "cuda_graph_decode")
    if rec is None or (method, 1, "float32") in failed:
        return None
    m = rec.find(M.STEP_MS.name, method=method, batch=1, dtype="float32", readback=False)
    return None if m is None else float(m.value)


def run(ctx: Context) -> None:
    measure(ctx, "end")
    records = ctx.results.experiments
    for method in METHODS:
        start, end = sentinel_ms(records, method, "start"), sentinel_ms([ctx.record], method, "end")
        if start is None:
            continue
        if end is not None:
            drift = end / start
            ctx.metric(M.SENTINEL_DRIFT, round(drift, 4), method=method)
            ctx.check(f"the fresh-process {method} step moved less than {TOLERANCE:.0%} over the run", abs(drift - 1)
                      <= TOLERANCE, detail=f"start {start:.4g} ms, end {end:.4g} ms ({drift:.3f}x)", fatal=False,
                      method=method)
        in_run = _in_run_ms(records, method)
        if in_run is None:
            continue
        ratio = in_run / start
        ctx.metric(M.IN_RUN_OVER_SENTINEL, round(ratio, 4), method=method)
        name = "in-run eager" if method == Method.EAGER else f"in-run {method}"
        ctx.check(f"{name} within {TOLERANCE:.0%} of the fresh-process sentinel", abs(ratio - 1) <= TOLERANCE,
                  detail=f"cuda_graph_decode {in_run:.4g} ms against the sentinel's {start:.4g} ms at the start "
                         f"({ratio:.3f}x)", fatal=False, method=method)
