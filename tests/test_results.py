"""The results contract: round trip, atomic writes, strict loading with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab import results as R


def _results() -> R.Results:
    rec = R.Record(id="x", title="X", status="OK", duration_s=1.5,
                   metrics=[R.Metric("step_ms", 1.25, "ms", {"method": "eager", "batch": 1})],
                   samples=[R.Samples("step_ms", "ms", {"method": "eager", "batch": 1}, [1.0, 1.25, 1.5])])
    nr = R.Record(id="y", title="Y", status="NOT_RUN", reason=R.Reason("no_cuda", "no CUDA device"))
    return R.Results(run=R.RunInfo(profile="smoke", started_at="t"), manifest={"a": 1}, experiments=[rec, nr])


def test_round_trip(tmp_path: Path) -> None:
    path = R.save(_results(), tmp_path)
    loaded = R.load(tmp_path)
    assert loaded.schema == R.SCHEMA
    assert loaded.record("x").metric("step_ms", method="eager").value == 1.25
    assert loaded.record("y").reason == R.Reason("no_cuda", "no CUDA device")
    assert json.loads(path.read_text())["experiments"][0]["samples"][0]["values"] == [1.0, 1.25, 1.5]


def test_non_finite_numbers_stay_strict_json(tmp_path: Path) -> None:
    res = _results()
    res.experiments[0].metrics.append(R.Metric("diff", float("nan"), "abs"))
    R.save(res, tmp_path)
    json.loads((tmp_path / "results.json").read_text())  # would raise on a bare NaN


def test_atomic_write_leaves_no_partial_file(tmp_path: Path) -> None:
    class Boom:
        pass

    with pytest.raises(TypeError):
        R.write_json_atomic(tmp_path / "r.json", {"bad": Boom()})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d.update(schema=99), "unknown results schema 99"),
    (lambda d: d.pop("manifest"), "missing field 'manifest'"),
    (lambda d: d["experiments"][0].pop("status"), "missing field experiments[0].'status'"),
    (lambda d: d["experiments"][1].update(reason=None), "NOT_RUN without a reason"),
    (lambda d: d["experiments"][0].update(status="MAYBE"), "unknown status 'MAYBE'"),
])
def test_loader_refuses_off_contract_files(tmp_path: Path, mutate, expected) -> None:
    data = R.to_dict(_results())
    mutate(data)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    with pytest.raises(R.ResultsError) as err:
        R.load(path)
    message = str(err.value)
    assert expected in message and str(path) in message and "\n" not in message


def test_loader_names_file_on_bad_json(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text("{not json")
    with pytest.raises(R.ResultsError, match="not valid JSON"):
        R.load(path)
