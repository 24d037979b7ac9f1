"""lab.contract.query: the one way to ask a run for a record or a metric."""

from __future__ import annotations

import pytest

from lab.contract import metrics as M
from lab.contract import query as q
from lab.contract.catalogue import CATALOGUE
from lab.contract.names import Experiment, Param, Status
from lab.contract.results import STATUSES, Check, Metric, Reason, Record


def _rec(*metrics: Metric, status: str = "OK", checks: list[Check] | None = None) -> Record:
    return Record(Experiment.CUDA_GRAPH_DECODE, "t", status, None if status == "OK" else Reason("check_failed", "x"),  # type: ignore[arg-type]
                  metrics=list(metrics), checks=checks or [])


def test_the_enums_are_the_catalogue_and_the_schema() -> None:
    assert [e.value for e in Experiment] == [spec.id for spec in CATALOGUE]
    assert tuple(Status) == STATUSES


def test_one_maybe_all_select_by_included_params_and_refuse_two() -> None:
    a = Metric(M.STEP_MS.name, 1.0, "ms", {"method": "eager", "batch": 1, "readback": False})
    b = Metric(M.STEP_MS.name, 2.0, "ms", {"method": "eager", "batch": 1, "readback": True})
    rec = _rec(a, b)
    assert q.all(rec, M.STEP_MS, method="eager") == [a, b]
    assert q.one(rec, M.STEP_MS, readback=True) is b
    assert q.maybe(rec, M.STEP_MS, method="graph") is None and q.all(None, M.STEP_MS) == []
    with pytest.raises(q.QueryError, match="2 metrics"):
        q.maybe(rec, M.STEP_MS, method="eager")  # never settled by taking the first
    with pytest.raises(q.QueryError, match="0 metrics"):
        q.one(rec, M.STEP_MS, method="graph")
    with pytest.raises(q.QueryError, match=r"with \{'method': 'graph'\}"):  # a Param key prints as the reader wrote it
        q.one(rec, M.STEP_MS, **{Param.METHOD: "graph"})
    assert rec.find(M.STEP_MS.name, readback=False) is a  # Record's own lookups ask the same way


def test_experiment_ok_and_measured() -> None:
    failed = Check("tokens_equal", False, params={"method": "graph", "batch": 8, "dtype": "float32"})
    rec = _rec(Metric(M.STEP_MS.name, 1.0, "ms"), status="FAILED", checks=[failed])
    assert q.experiment([rec], Experiment.CUDA_GRAPH_DECODE) is rec
    assert q.ok([rec], Experiment.CUDA_GRAPH_DECODE) is None
    assert q.measured([rec], Experiment.CUDA_GRAPH_DECODE) == (rec, {("graph", 8, "float32")})
    assert q.measured([_rec(status="FAILED")], Experiment.CUDA_GRAPH_DECODE) == (None, set())
    assert q.experiment([rec], Experiment.CEILINGS) is None
