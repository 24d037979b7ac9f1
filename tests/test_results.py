"""The results contract: round trip, atomic writes, strict loading with one-line errors naming file and field."""

from __future__ import annotations

import copy
import importlib
import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from lab.contract import profiles, schema_doc
from lab.run import runner
from lab.contract import results as R
from report.pages.compare import load_side
from report_helpers import gpu_fixture, repeats
from lab.run.manifest import REPO_ROOT
from lab.contract.manifest_schema import check_manifest
from lab.contract.options import NoOptions

COMMITTED = sorted((REPO_ROOT / "manifests" / "reference").glob("*/results.json")) + sorted(
    p for p in (REPO_ROOT / "tests" / "fixtures" / "report_runs").glob("*/results.json") if p.parent.name != "malformed")
CPU_SMOKE = REPO_ROOT / "tests" / "fixtures" / "report_runs" / "cpu-smoke"


def _results() -> R.Results:
    rec = R.Record(id="x", title="X", status="OK", duration_s=1.5,
                   metrics=[R.Metric("step_ms", 1.25, "ms", {"method": "eager", "batch": 1})],
                   samples=[R.Samples("step_ms", "ms", {"method": "eager", "batch": 1}, [1.0, 1.25, 1.5])])
    nr = R.Record(id="y", title="Y", status="NOT_RUN", reason=R.Reason("no_cuda", "no CUDA device"))
    manifest = json.loads((CPU_SMOKE / "manifest.json").read_text())
    return R.Results(run=R.RunInfo(profile="smoke", started_at="t"), manifest=manifest, experiments=[rec, nr])


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of the smoke profile (two quick experiments), written by the runner."""
    out = tmp_path_factory.mktemp("smoke")
    runner.run(profiles.get("smoke"), out, only=["toolchain", "graph_breaks"])
    return out


def test_round_trip(tmp_path: Path) -> None:
    path = R.save(_results(), tmp_path)
    loaded = R.load(tmp_path)
    assert loaded.schema == R.SCHEMA
    assert loaded.record("x").metric("step_ms", method="eager").value == 1.25
    assert loaded.record("y").reason == R.Reason("no_cuda", "no CUDA device")
    assert json.loads(path.read_text())["experiments"][0]["samples"][0]["values"] == [1.0, 1.25, 1.5]


def test_a_real_smoke_run_round_trips_byte_for_byte(smoke_run: Path, tmp_path: Path) -> None:
    loaded = R.load(smoke_run)
    assert [(r.id, r.status) for r in loaded.experiments] == [("toolchain", "OK"), ("graph_breaks", "OK")]
    assert loaded.run.state == "complete" and loaded.manifest["manifest_version"] == 1
    R.save(loaded, tmp_path)
    assert (tmp_path / "results.json").read_text() == (smoke_run / "results.json").read_text()
    check_manifest(json.loads((smoke_run / "manifest.json").read_text()), smoke_run / "manifest.json")


def test_non_finite_numbers_stay_strict_json_and_read_back(tmp_path: Path) -> None:
    res = _results()
    res.experiments[0].metrics += [R.Metric("made_up_diff", float("nan"), "abs"),
                                   R.Metric("made_up_ratio", float("-inf"), "x"),
                                   R.Metric("made_up_rounds", [1.0, float("inf")], "ms")]
    R.save(res, tmp_path)
    text = (tmp_path / "results.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in the file"))
    rec = R.load(tmp_path).record("x")
    assert math.isnan(rec.metric("made_up_diff").value) and rec.metric("made_up_ratio").value == float("-inf")
    assert rec.metric("made_up_rounds").value == [1.0, float("inf")]


def test_atomic_write_leaves_no_partial_file(tmp_path: Path) -> None:
    class Boom:
        pass

    with pytest.raises(TypeError):
        R.write_json_atomic(tmp_path / "r.json", {"bad": Boom()})
    assert list(tmp_path.iterdir()) == []


def _set(path: str, value: object):
    """A mutation of the results dict: set the dotted/indexed field `path` to `value`."""
    def mutate(d: dict) -> None:
        keys = [int(k) if k.isdigit() else k for k in path.replace("[", ".").replace("]", "").split(".")]
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value
    return mutate


def _drop(path: str):
    def mutate(d: dict) -> None:
        *head, last = path.split(".")
        for k in head:
            d = d[int(k) if k.isdigit() else k]
        del d[last]
    return mutate


REFUSED = [
    (_set("schema", 99), "unknown results schema 99 (this lab reads results schema 1)"),
    (_set("schema", "1"), "unknown results schema '1'"),
    (_drop("schema"), "missing field schema"),
    (_set("manifest.manifest_version", 2), "unknown manifest.manifest_version 2"),
    (_drop("manifest.manifest_version"), "missing field manifest.manifest_version"),
    (_drop("manifest"), "missing field manifest"),
    (_set("manifest.host", "vm"), "field manifest.host: expected an object, got text 'vm'"),
    (_set("manifest.gpu.nvidia_smi", "H200"), "field manifest.gpu.nvidia_smi: expected an object, got text 'H200'"),
    (_set("manifest.gpu.nvidia_smi", {"gpus": [{"name": 7}]}), "field manifest.gpu.nvidia_smi.gpus[0].name: expected "
                                                                 "text, got number 7"),
    (_set("manifest.torch.version", 2.11), "field manifest.torch.version: expected text"),
    (_set("manifest.cpu.usable_cores", "16"), "field manifest.cpu.usable_cores: expected an integer"),
    (_set("run.state", "paused"), "field run.state: Input should be 'running', 'complete', 'interrupted' or 'stopped'"),
    (_set("run.profile", None), "field run.profile: expected text, got null"),
    (_drop("experiments.0.status"), "missing field experiments[0].status (experiment 'x')"),
    (_set("experiments[0].status", "MAYBE"), "field experiments[0].status (experiment 'x'): Input should be 'OK'"),
    (_set("experiments[1].reason", None), "experiments[1] (experiment 'y'): a NOT_RUN record needs a reason"),
    (_set("experiments[1].reason", {"code": "no_gpu_here", "message": "m"}), "unknown reason code 'no_gpu_here'"),
    (_set("experiments[0].skipped", [{"item": "a", "code": "typo", "message": "m"}]), "unknown reason code 'typo'"),
    (_set("experiments[0].surprise", 1), "field experiments[0].surprise (experiment 'x'): unknown field"),
    (_set("experiments[0].duration_s", "1.5"), "field experiments[0].duration_s (experiment 'x'): expected a number"),
    (_set("experiments[0].metrics[0].value", "1.25"), "(experiment 'x', metric 'step_ms'): metric 'step_ms' is "
                                                      "declared as number; got text '1.25'"),
    (_set("experiments[0].metrics[0].value", True), "metric 'step_ms' is declared as number; got boolean true"),
    (_set("experiments[0].metrics[0].value", 1e400), "Infinity is not a JSON value"),  # json.dump writes Infinity
    (_set("experiments[0].metrics[0].value", "NaN"), "got text 'NaN'"),
    (_set("experiments[0].metrics[0]", {"name": "made_up", "value": "1", "unit": ""}), "metric 'made_up' is not "
                                    "declared in lab.contract.metrics, so a number, a boolean, a list of numbers or null; got text"),
    (_set("experiments[0].metrics[0]", {"name": "made_up", "value": ["a"], "unit": ""}), "metric 'made_up'"),
    (_set("experiments[0].metrics[0]", {"name": "binding", "value": 3, "unit": ""}), "metric 'binding' is "
                                                                                      "declared as text; got number 3"),
    (_set("experiments[0].metrics[0].value", {"a": 1}), "a metric value is a number, a boolean, a list of numbers"),
    (_set("experiments[0].metrics[0].spread", {"n": 1.5}), "field experiments[0].metrics[0].spread.n (experiment "
                                                           "'x', metric 'step_ms'): expected an integer"),
    (_set("experiments[0].samples[0].values", [1.0, "fast"]), "field experiments[0].samples[0].values[1]"),
    (_set("experiments[0].checks", [{"name": "c", "passed": "yes"}]), "field experiments[0].checks[0].passed "
                                                                       "(experiment 'x', check 'c'): expected true"),
]


@pytest.mark.parametrize("mutate, expected", REFUSED)
def test_loader_refuses_off_contract_files(tmp_path: Path, mutate, expected) -> None:
    data = R.to_dict(_results())
    mutate(data)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    with pytest.raises(R.ResultsError) as err:
        R.load(path)
    message = str(err.value)
    assert expected in message and message.startswith(f"{path}: ") and "\n" not in message, message


@pytest.mark.parametrize("content, expected", [
    (b'{"schema": 1, "run": {"profile"', "not valid JSON (line 1: Expecting ':' delimiter)"),
    (b"", "not valid JSON"),
    (b'{"schema": 1, "host": "caf\xe9"}', "not UTF-8 text (byte 26: invalid continuation byte)"),
    (b"\xff\xfe{\x00}\x00", "not UTF-8 text"),
    (b"[1, 2]", "top level is not a JSON object"),
    (b'{"schema": 1, "x": ' + b"9" * 5000 + b"}", "not usable JSON (ValueError"),
    (b"[" * 100000 + b"]" * 100000, "not usable JSON (RecursionError"),
])
def test_loader_names_file_on_undecodable_bytes(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "results.json"
    path.write_bytes(content)
    with pytest.raises(R.ResultsError) as err:
        R.load(tmp_path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and expected in message and "\n" not in message, message


def test_loader_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(R.ResultsError, match=r"results.json: cannot read \(No such file or directory\)"):
        R.load(tmp_path)


def test_save_refuses_an_unserialisable_value_naming_it_and_writes_nothing(tmp_path: Path) -> None:
    import torch

    res = _results()
    res.experiments[0].metrics.append(R.Metric("made_up_count", torch.tensor(3), "count"))
    with pytest.raises(R.ResultsError, match=r"field experiments\[0\].metrics\[1\].value \(experiment 'x', metric "
                                             r"'made_up_count'\): a metric value is .* not a Python Tensor"):
        R.save(res, tmp_path)
    assert not (tmp_path / "results.json").exists()
    res = _results()
    res.experiments[0].notes["seen"] = {1, 2}
    with pytest.raises(R.ResultsError, match=r"field experiments\[0\].notes.seen \(experiment 'x'\): not a JSON "
                                             r"value, got a Python set"):
        R.save(res, tmp_path)


def test_quarantine_removes_what_cannot_be_stored_and_names_it(tmp_path: Path) -> None:
    import numpy as np
    import torch

    res = _results()
    rec = res.experiments[0]
    rec.metrics += [R.Metric("made_up_count", torch.tensor(3), "count"), R.Metric("made_up_text", "fast", ""),
                    R.Metric("made_up_count", np.float64(2.0), "count", {"fn": "f"}),  # a float subclass: stored
                    R.Metric("made_up_diff", np.float32(1), "abs"), R.Metric("made_up_n", np.int64(1), "count")]
    rec.notes.update(ok=[1, "a"], seen={1, 2})
    problems = R.quarantine(rec)
    assert problems == [
        "field metrics[1].value (metric 'made_up_count'): a metric value is a number, a boolean, a list of numbers, "
        "text or null, not a Python Tensor",
        "field metrics[2].value (metric 'made_up_text'): metric 'made_up_text' is not declared in lab.contract.metrics, so a "
        "number, a boolean, a list of numbers or null; got text 'fast'",
        "field metrics[4].value (metric 'made_up_diff'): a metric value is a number, a boolean, a list of numbers, "
        "text or null, not a Python float32",
        "field metrics[5].value (metric 'made_up_n'): a metric value is a number, a boolean, a list of numbers, "
        "text or null, not a Python int64",
        "field notes.seen: not a JSON value, got a Python set"]
    assert [(m.name, m.value) for m in rec.metrics] == [("step_ms", 1.25), ("made_up_count", 2.0)]
    assert rec.notes == {"ok": [1, "a"]}
    R.save(res, tmp_path)
    assert R.load(tmp_path).record("x").metric("made_up_count").value == 2


def test_an_unrecordable_value_fails_its_experiment_not_the_run(tmp_path: Path, monkeypatch) -> None:
    def records_a_set(ctx) -> None:
        ctx.note("kept", [1, "a"])
        ctx.note("seen", {1, 2})

    real_import = importlib.import_module
    monkeypatch.setattr(importlib, "import_module",
                        lambda name: SimpleNamespace(run=records_a_set, Options=NoOptions) if name == "lab.experiments.graph_breaks"
                        else real_import(name))
    res = runner.run(profiles.get("smoke"), tmp_path, only=["toolchain", "graph_breaks"])
    rec = res.record("graph_breaks")
    assert rec.status == "FAILED" and rec.reason.code == "exception"
    # caught where it is recorded: the message names the note, the traceback the experiment's line
    assert rec.reason.message == "ValueError: graph_breaks recorded note 'seen': not a JSON value, got a Python set"
    assert rec.notes == {"kept": [1, "a"]} and "records_a_set" in rec.error["traceback"]
    loaded = R.load(tmp_path)
    assert loaded.run.state == "complete" and [r.status for r in loaded.experiments] == ["OK", "FAILED"]


def without_exact_repeats(raw: dict) -> dict:
    """`raw` (results.json's) less every metric equal in all to an earlier one of its record."""
    out = copy.deepcopy(raw)
    for rec in out["experiments"]:
        rec["metrics"] = [m for i, m in enumerate(rec["metrics"]) if m not in rec["metrics"][:i]]
    return out


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name)
def test_every_committed_run_loads_losslessly_and_records_no_metric_twice(path: Path) -> None:
    """What loading drops is exact repeats alone (R.once: the CPU references hold compile_cost's first_call_s
    twice, the sweep reference model_scaling's weights_MiB); the fixtures, made by the lab as it is, hold none."""
    raw = json.loads(path.read_text())
    loaded = R.load(path)
    assert R.to_dict(loaded) == without_exact_repeats(raw) and not repeats(R.to_dict(loaded)["experiments"])
    if "fixtures" in path.parts:
        assert not repeats(raw["experiments"])
    manifest = path.parent / R.MANIFEST_NAME
    check_manifest(json.loads(manifest.read_text()), manifest)
    assert load_side(manifest).manifest == json.loads(manifest.read_text())


def test_the_gpu_fixtures_record_no_metric_twice() -> None:
    h200 = json.loads((Path(__file__).parent / "fixtures" / "report_runs" / "h200-fixture" / "results.json").read_text())
    assert not repeats(gpu_fixture.build()["experiments"]) and not repeats(h200["experiments"])


def test_loading_drops_an_exact_repeat_and_refuses_one_that_differs(tmp_path: Path) -> None:
    data = R.to_dict(_results())
    metrics = data["experiments"][0]["metrics"]
    metrics.append(copy.deepcopy(metrics[0]))
    assert repeats(data["experiments"]) == [("x", "step_ms", '{"batch": 1, "method": "eager"}')]  # what tests count
    assert R.from_dict(copy.deepcopy(data), "r.json").record("x").metrics == _results().record("x").metrics
    metrics[1]["value"] = 1.5
    with pytest.raises(R.ResultsError) as err:
        R.from_dict(data, "r.json")
    assert str(err.value) == ("r.json: field experiments[0].metrics[1]: metric 'step_ms' with params {'method': "
                              "'eager', 'batch': 1} again, with another value (1.25, then 1.5): one of them is stale")


def test_the_committed_runs_are_all_there() -> None:
    names = {p.parent.name for p in COMMITTED}
    assert {"cpu-2026-12-02-full", "h200-2026-12-02-gpu", "h200-2026-12-02-sweep", "cpu-smoke"} <= names


def test_compare_refuses_a_bare_manifest_of_the_wrong_shape(tmp_path: Path) -> None:
    manifest = json.loads((CPU_SMOKE / "manifest.json").read_text())
    for field, value, expected in (("host", "vm", "field host: expected an object, got text 'vm'"),
                                   ("manifest_version", 3, "unknown manifest_version 3 (this lab reads "
                                                           "manifest_version 1)")):
        bad = copy.deepcopy(manifest)
        bad[field] = value
        path = tmp_path / "manifest.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(R.ResultsError) as err:
            load_side(path)
        assert str(err.value) == f"{path}: {expected}"


def test_manifest_allows_unknown_fields_but_checks_typed_ones() -> None:
    manifest = json.loads((CPU_SMOKE / "manifest.json").read_text())
    manifest["from_a_newer_lab"] = {"anything": [1, "two"]}
    manifest["host"]["uptime"] = 12
    check_manifest(manifest, "m.json")
    manifest["lab"]["dirty"] = "no"
    with pytest.raises(R.ResultsError, match=r"^m.json: field lab.dirty: expected true or false, got text 'no'$"):
        check_manifest(manifest, "m.json")


def test_docs_tables_and_json_schema_are_generated_from_the_schema() -> None:
    assert schema_doc.stale() == [], "run `python -m lab.contract.schema_doc`"
    doc = schema_doc.DOC.read_text()
    for field in ("`rel_iqr`", "`nvidia_smi`", "`usable_cores`", "`manifest_version`", "`flag_off`"):
        assert field in doc
    assert schema_doc.render(doc.replace("| `rel_iqr` | number |", "| `rel_iqr` | text |")) == doc


def test_host_python_modules_do_not_need_pydantic() -> None:
    """The container tools run with the host's Python, which has neither torch nor pydantic."""
    code = ("import sys; import lab.containers, lab.containers.build, lab.containers.run, lab.contract.reasons, lab.atomic, lab.host.hostinfo; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('pydantic', 'torch')]; print(bad); "
            "sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
