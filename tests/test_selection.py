"""lab/experiments/selection.py: the winner, a tie, and what was not measured."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lab.contract import profiles
from lab.contract.catalogue import BY_ID
from lab.experiments import selection
from lab.contract.reasons import Code
from lab.contract.results import Metric, Reason, Record, Skipped, Spread
from lab.run.context import Context


def _timing(method: str, median: float, iqr: float = 0.01, **params) -> Metric:
    sp = Spread(n=5, median=median, q1=median - iqr, q3=median + iqr, min=median - iqr, max=median + iqr,
                rel_iqr=2 * iqr / median, noisy=False)
    return Metric("step_ms", median, "ms", {"method": method, **params}, sp)


def test_selection_picks_winner_tie_and_not_measured() -> None:
    decode = Record(id="cuda_graph_decode", title="", status="OK", metrics=[
        _timing("eager", 3.2, batch=1, dtype="float32", readback=False),
        _timing("graph", 0.85, batch=1, dtype="float32", readback=False),
        _timing("compile-default", 3.6, batch=1, dtype="float32", readback=False),
        _timing("compile+graph", 0.645, batch=1, dtype="float32", readback=False),
        _timing("eager", 3.3, batch=1, dtype="float32", readback=True)])
    gemm = Record(id="gemm_bound", title="", status="OK",
                  metrics=[_timing("eager", 10.0, 0.5), _timing("compile-default", 9.9, 0.5)])
    launch = Record(id="launch_overhead", title="", status="OK",
                    metrics=[_timing("eager", 1.0), _timing("compile-default", 0.2)],
                    skipped=[Skipped("graph and compile+graph", "no_cuda", "needs CUDA")])
    recipe = Record(id="manual_graph_recipe", title="", status="NOT_RUN", reason=Reason("no_cuda", "no GPU"))
    fusion = Record(id="fusion", title="", status="FAILED")  # a stored run's failure without a reason
    results = SimpleNamespace(experiments=[decode, gemm, launch, recipe, fusion])
    rec = Record(id="selection", title="", status="OK")
    ctx = Context(BY_ID["selection"], profiles.get("smoke"), None, rec, results, None)  # checks every metric recorded
    selection.run(ctx)
    case = "batch=1, dtype=float32, readback=False"
    assert rec.metric("winner", workload="cuda_graph_decode", case=case).value == "compile+graph"
    assert rec.metric("speedup_vs_eager", workload="cuda_graph_decode", case=case).value == pytest.approx(3.2 / 0.645)
    assert rec.metric("winner", workload="gemm_bound").value == "eager"  # 1% faster, inside the spread: a tie
    assert rec.metric("tie_with_eager", workload="gemm_bound").value is True
    assert rec.metric("winner_family", workload="launch_overhead").value == "compile"
    assert "no_cuda" in rec.notes["evidence.launch_overhead.-"]
    skipped = {s.item: s.code for s in rec.skipped}
    assert skipped["manual_graph_recipe"] == "no_cuda" and skipped["fusion"] == "not_measured"
    assert {s.code for s in rec.skipped} <= {c.value for c in Code}  # machine-readable, never a status spelled small
    assert not any(m.params.get("case", "").endswith("readback=True") for m in rec.metrics)
