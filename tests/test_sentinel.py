"""lab.experiments.sentinel and sentinel_end: the fresh-process baseline and the run's own eager judged by it."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from lab.contract import metrics as M
from lab.contract.names import Method
from lab.contract.profiles import TINY
from lab.contract.results import Metric, Record
from lab.experiments import sentinel, sentinel_end
from lab.step.model import resolve_weights


@pytest.mark.slow
def test_the_child_warms_up_until_rounds_agree_and_returns_rounds_and_the_launch_cost():
    out = sentinel.child(dataclasses.asdict(TINY), resolve_weights(TINY, "random"), "cpu", prompt_len=4, max_len=32,
                         steps=6, rounds=3, max_rounds=4, agree=0.5, methods=(Method.EAGER,))
    assert list(out["rounds"]) == [Method.EAGER] and len(out["rounds"][Method.EAGER]) == 3
    assert all(len(r) == 6 for r in out["rounds"][Method.EAGER])
    assert 1 <= out["warmup_rounds"] <= 4 and min(out["launch_us_eager"]) > 0


def _rec(id_: str, metrics: list[Metric]) -> Record:
    return Record(id=id_, title=id_, status="OK", metrics=metrics)


def test_sentinel_end_compares_the_in_run_eager_and_the_drift(monkeypatch):
    start = _rec("sentinel", [Metric(M.SENTINEL_STEP_MS.name, 2.0, "ms", {"method": m, "batch": 1, "dtype": "float32",
                                                                          "when": "start"}) for m in sentinel.METHODS])
    decode = _rec("cuda_graph_decode", [Metric(M.STEP_MS.name, ms, "ms", {"method": m, "batch": 1, "dtype": "float32",
                                                                          "readback": False})
                                        for m, ms in ((Method.EAGER, 2.6), (Method.GRAPH, 2.05))])
    recorded: list[tuple] = []
    checks: list[tuple] = []
    record = _rec("sentinel_end", [Metric(M.SENTINEL_STEP_MS.name, 2.1, "ms", {"method": m, "batch": 1,
                                                                              "dtype": "float32", "when": "end"})
                                   for m in sentinel.METHODS])
    ctx = SimpleNamespace(results=SimpleNamespace(experiments=[start, decode]), record=record,
                          metric=lambda spec, value, **p: recorded.append((spec.name, value, p["method"])),
                          check=lambda name, ok, **kw: checks.append((name, ok)))
    monkeypatch.setattr(sentinel_end, "measure", lambda ctx, when: None)
    sentinel_end.run(ctx)
    assert (M.IN_RUN_OVER_SENTINEL.name, 1.3, Method.EAGER) in recorded  # 2.6 / 2.0
    assert (M.SENTINEL_DRIFT.name, 1.05, Method.EAGER) in recorded
    assert ("in-run eager within 10% of the fresh-process sentinel", False) in checks
    assert ("in-run graph within 10% of the fresh-process sentinel", True) in checks
    assert ("the fresh-process eager step moved less than 10% over the run", True) in checks
