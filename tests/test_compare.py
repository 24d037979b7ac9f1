"""`lab compare`: manifest differences, ratios and marks, in the manner of `asv compare`."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from lab.__main__ import main as lab_main
from lab.compare import compare, direction, flatten, judge, load_side, manifest_diff
from lab.results import Metric, ResultsError, Spread, write_json_atomic
from report_helpers import FIXTURES, gpu_fixture

CPU_RUN = FIXTURES / "report_runs" / "cpu-smoke"


def m(name: str, value, unit: str = "ms", spread: tuple[float, float] | None = None) -> Metric:
    sp = None if spread is None else Spread(n=9, median=value, q1=spread[0], q3=spread[1], min=spread[0],
                                            max=spread[1], rel_iqr=0.0, noisy=False)
    return Metric(name, value, unit, {}, sp)


def test_flatten_nested_fields_and_lists() -> None:
    flat = flatten({"gpu": {"nvidia_smi": {"gpus": [{"name": "H200", "driver_version": "580"}]}},
                    "container": {"markers": ["/.dockerenv"], "image": None}, "empty": {}})
    assert flat == {"gpu.nvidia_smi.gpus[0].name": "H200", "gpu.nvidia_smi.gpus[0].driver_version": "580",
                    "container.markers": ["/.dockerenv"], "container.image": None, "empty": {}}


def test_manifest_diff_names_fields_and_ignores_created_at() -> None:
    a = {"created_at": "1", "torch": {"version": "2.13.0+cpu"}, "libraries": {"triton": None}, "host": {"h": "a"}}
    b = {"created_at": "2", "torch": {"version": "2.11.0+cu130"}, "libraries": {"triton": "3.6.0"}, "host": {"h": "a"},
         "container": {"image": "lab:gpu"}}
    diffs = [(d.key, d.a, d.b) for d in manifest_diff(a, b)]
    assert diffs == [("torch.version", "2.13.0+cpu", "2.11.0+cu130"), ("libraries.triton", None, "3.6.0"),
                     ("container.image", "(absent)", "lab:gpu")]


@pytest.mark.parametrize("name, unit, expected", [
    ("step_ms", "ms", "lower"), ("setup_s", "s", "lower"), ("first_call_s", "s", "lower"),
    ("break_even_steps", "steps", "lower"), ("state_MiB", "MiB", "lower"), ("speedup_vs_eager", "x", "higher"),
    ("bandwidth_GBps", "GBps", "higher"), ("matmul_TFLOPs", "TFLOPs", "higher"), ("token_agreement", "fraction", "higher"),
    ("graphs", "count", None), ("tokens_equal", "bool", None), ("binding", "", None),
])
def test_direction_rule(name: str, unit: str, expected) -> None:
    assert direction(name, unit) == expected


def test_marks() -> None:
    assert judge(m("step_ms", 1.0), m("step_ms", 0.8))[1:] == ("better", "")
    assert judge(m("step_ms", 1.0), m("step_ms", 1.3))[1] == "worse"
    assert judge(m("step_ms", 1.0), m("step_ms", 1.05))[1] == "same"
    assert judge(m("speedup_vs_eager", 2.0, "x"), m("speedup_vs_eager", 3.0, "x"))[1] == "better"
    assert judge(m("speedup_vs_eager", 2.0, "x"), m("speedup_vs_eager", 1.0, "x"))[1] == "worse"
    ratio, mark, note = judge(m("step_ms", 1.0, spread=(0.7, 1.4)), m("step_ms", 1.3, spread=(1.1, 1.6)))
    assert mark == "same" and note == "interquartile ranges overlap" and ratio == pytest.approx(1.3)
    assert judge(m("step_ms", 1.0, spread=(0.95, 1.05)), m("step_ms", 1.3, spread=(1.2, 1.4)))[1] == "worse"
    assert judge(m("step_ms", 1.0), m("step_ms", 1.0, "s"))[1] == "not comparable"
    assert judge(m("step_ms", 0.0), m("step_ms", 1.0))[1] == "not comparable"
    assert judge(m("graphs", 1, "count"), m("graphs", 2, "count"))[1] == "changed"
    assert judge(m("limit_hit", True, "bool"), m("limit_hit", False, "bool"))[1] == "changed"
    assert judge(m("binding", "launch", ""), m("binding", "launch", ""))[1] == "same"


def _gpu_side(tmp_path: Path, edit=None) -> Path:
    data = gpu_fixture.build()
    if edit:
        edit(data)
    write_json_atomic(tmp_path / "results.json", data)
    write_json_atomic(tmp_path / "manifest.json", data["manifest"])
    return tmp_path


def test_compare_two_runs_statuses_checks_and_metrics(tmp_path: Path) -> None:
    before = _gpu_side(tmp_path / "a")

    def regress(data: dict) -> None:
        cgd = data["experiments"][0]
        for metric in cgd["metrics"]:
            if metric["name"] == "step_ms" and metric["params"]["method"] == "graph":
                metric["value"] *= 2
                metric["spread"] = None
        cgd["checks"][0]["passed"] = False
        next(r for r in data["experiments"] if r["id"] == "fusion").update(
            status="FAILED", reason={"code": "exception", "message": "boom"})
        data["manifest"]["torch"]["version"] = "2.12.0+cu130"

    after = _gpu_side(tmp_path / "b", regress)
    c = compare(load_side(before), load_side(after))
    assert [(d.key, d.a, d.b) for d in c.fields] == [("torch.version", "2.11.0+cu130", "2.12.0+cu130")]
    graph = [r for r in c.metrics if r.experiment == "cuda_graph_decode" and r.name == "step_ms"
             and r.params.get("method") == "graph"]
    assert graph and all(r.mark == "worse" and r.ratio == pytest.approx(2.0) for r in graph)
    eager = [r for r in c.metrics if r.name == "step_ms" and r.params.get("method") == "eager"]
    assert eager and all(r.mark == "same" for r in eager)
    assert [(s.experiment, s.a, s.b, s.mark) for s in c.statuses] == [("fusion", "OK", "FAILED", "newly failing")]
    assert [(ch.name, ch.mark) for ch in c.checks] == [("tokens_equal", "newly failing")]
    back = compare(load_side(after), load_side(before))
    assert [s.mark for s in back.statuses] == ["fixed"] and [ch.mark for ch in back.checks] == ["fixed"]


def test_compare_cpu_and_gpu_counts_what_only_one_has(tmp_path: Path) -> None:
    c = compare(load_side(CPU_RUN), load_side(_gpu_side(tmp_path)))
    status = {s.experiment: s for s in c.statuses}
    assert status["cuda_graph_decode"].mark == "not comparable" and status["cuda_graph_decode"].a_reason.startswith(
        "no_cuda")
    assert c.only_b["cuda_graph_decode"] > 100
    assert c.only_a["toolchain"] == 8  # the GPU fixture has no toolchain record: counted, not dropped
    assert {d.key for d in c.fields} >= {"torch.version", "gpu.nvidia_smi", "host.hostname"}


def test_cli_prints_fields_and_marks(tmp_path: Path, capsys) -> None:
    assert lab_main(["compare", str(CPU_RUN), str(_gpu_side(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "Manifest fields that differ:" in out and "torch.version" in out and "2.13.0+cpu  ->  2.11.0+cu130" in out
    assert "not comparable  cuda_graph_decode: OK -> NOT_RUN" not in out  # A is the CPU run: NOT_RUN -> OK
    assert "not comparable  cuda_graph_decode: NOT_RUN -> OK" in out
    assert "newly failing   graph_hazards: NOT_RUN -> FAILED" in out
    assert "same" in out and "graph_breaks.graphs{function=uses_item} [count]" in out
    assert "Metrics only in B: cuda_graph_decode" in out


def test_cli_manifest_files(tmp_path: Path, capsys) -> None:
    other = json.loads((CPU_RUN / "manifest.json").read_text())
    other["libraries"]["transformers"] = "4.46.0"
    write_json_atomic(tmp_path / "manifest.json", other)
    assert lab_main(["compare", str(CPU_RUN / "manifest.json"), str(tmp_path / "manifest.json")]) == 0
    out = capsys.readouterr().out
    assert "libraries.transformers" in out and "one side is a manifest only" in out


@pytest.mark.parametrize("content, expected", [
    ("{oops", "not valid JSON"), ('{"schema": 7, "experiments": []}', "unknown results schema 7"),
    ('{"hello": 1}', "neither a results file"),
])
def test_cli_bad_input_one_line(tmp_path: Path, capsys, content: str, expected: str) -> None:
    bad = tmp_path / "results.json"
    bad.write_text(content)
    assert lab_main(["compare", str(CPU_RUN), str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {bad}") and expected in err[0]


def test_load_side_errors(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="neither results.json nor manifest.json"):
        load_side(tmp_path)
    with pytest.raises(ResultsError, match="no such file"):
        load_side(tmp_path / "nope")
    data = copy.deepcopy(gpu_fixture.build())
    del data["experiments"][0]["metrics"][0]["unit"]
    write_json_atomic(tmp_path / "x" / "results.json", data)
    field = r"missing field experiments\[0\].metrics\[0\].unit \(experiment 'cuda_graph_decode', metric 'step_ms'\)"
    with pytest.raises(ResultsError, match=rf"results.json: {field}"):
        load_side(tmp_path / "x")
