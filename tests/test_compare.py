"""`lab compare`: every mark follows from a metric's declaration (lab.contract.metrics) through the rules of lab.contract.marks.

The cases the issue found wrong are tested first, by name; then every rule on its own, the comparison of two
runs, the committed reference runs, and the command line (text, JSON, one-line errors, control characters).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import json
from pathlib import Path

import pytest

from lab.contract import metrics as M
from lab.__main__ import main as lab_main
from lab.contract.catalogue import BY_ID
from report.pages.compare import Side, compare, explain, flatten, load_side, manifest_diff
from report.pages.compare_text import format_text, records, safe, to_json
from lab.run.manifest import REPO_ROOT
from lab.contract.marks import DEFAULT, Value, judge, option_value
from lab.contract.results import Metric, Record, Results, ResultsError, RunInfo, write_json_atomic
from report_helpers import FIXTURES, gpu_fixture, h200_reference

CPU_RUN = FIXTURES / "report_runs" / "cpu-smoke"
REFERENCE = REPO_ROOT / "manifests" / "reference"
MODEL = {"name": "gpt2-124M", "n_layer": 12, "n_embd": 768}


def manifest(**extra: object) -> dict:
    return {"manifest_version": 1, "profile": {"name": "cpu", "model": dict(MODEL), "max_len": 256},
            "compile_cache": {"state": "warm"}} | extra


def v(value, unit: str = "ms", spread: tuple[float, float] | None = None, **kw) -> Value:
    q1, q3 = spread if spread else (None, None)
    return Value(value, unit, kw.pop("params", {}), q1, q3, manifest=kw.pop("manifest", manifest()), **kw)


def mark(spec, a, b, **kw) -> tuple:
    verdict = judge(spec, a, b, **kw)
    return verdict.mark, verdict.reason


# ---------------------------------------------------------------------------- the cases of the issue

def test_saving_per_call_up_is_better() -> None:
    verdict = judge(M.SAVING_MS_PER_CALL, v(10.29), v(132.0))
    assert (verdict.mark, verdict.ratio) == ("better", pytest.approx(132 / 10.29))


def test_saving_per_call_changing_sign_is_not_comparable() -> None:
    verdict = judge(M.SAVING_MS_PER_CALL, v(5.06), v(-40.66))
    assert verdict.mark == "not comparable" and verdict.ratio is None and "different sign" in verdict.reason


def test_further_from_the_bound_is_worse() -> None:
    assert mark(M.MEASURED_OVER_BOUND, v(1.94, "x"), v(7.72, "x"))[0] == "worse"
    assert mark(M.MEASURED_OVER_BOUND, v(7.72, "x"), v(1.94, "x"))[0] == "better"


def test_break_even_against_never_is_not_comparable_with_the_reason() -> None:
    verdict = judge(M.BREAK_EVEN_CALLS, v(660, "calls"), v(None, "calls"))
    assert verdict.mark == "not comparable" and verdict.reason == "B is null (never): a value against null"
    assert judge(M.BREAK_EVEN_CALLS, v(None, "calls"), v(660, "calls")).reason.startswith("A is null (never)")


def _run(records: list[Record], man: dict, name: str = "x") -> Side:
    results = Results(run=RunInfo(profile="cpu", started_at="2026-11-29T09:00:00+00:00"), manifest=man,
                      experiments=records)
    return Side(Path(name) / "results.json", man, results, name=name)


def _fusion(step: float, nbytes: int) -> Record:
    p = {"method": "eager", "n_ops": 4, "residency": "memory"}
    return Record("fusion", "fusion", "OK", metrics=[Metric("step_ms", step, "ms", p), Metric("bytes_moved", nbytes, "B", p),
                                                     Metric("speedup", 2.0, "x", {"n_ops": 4, "residency": "memory"})])


def test_fusion_step_with_other_bytes_moved_is_not_comparable() -> None:
    c = compare(_run([_fusion(0.5, 1 << 27)], manifest()), _run([_fusion(24.7, 1 << 31)], manifest()))
    rows = {r.name: r for r in c.metrics}
    assert rows["step_ms"].mark == "not comparable"
    assert rows["step_ms"].reason == f"bytes_moved differs: {1 << 27} vs {1 << 31}"
    # the speedup has fewer params: it is judged by every bytes_moved whose params include its own
    assert rows["speedup"].mark == "not comparable" and rows["speedup"].reason.startswith("bytes_moved differs")
    assert rows["bytes_moved"].mark == "changed"  # no direction: never better or worse
    same = compare(_run([_fusion(0.5, 1 << 27)], manifest()), _run([_fusion(1.0, 1 << 27)], manifest()))
    assert {r.name: r.mark for r in same.metrics}["step_ms"] == "worse"


def _inductor(setup: float) -> Record:
    return Record("inductor", "inductor", "OK", metrics=[Metric("setup_s", setup, "s", {"step": "indexed"})])


def test_compile_time_from_a_cold_and_a_warm_cache_is_not_comparable() -> None:
    cold, warm = manifest(compile_cache={"state": "cold"}), manifest(compile_cache={"state": "warm"})
    row = compare(_run([_inductor(25.25)], cold), _run([_inductor(3.27)], warm)).metrics[0]
    assert (row.mark, row.reason) == ("not comparable", "compile_cache.state differs: cold vs warm")
    row = compare(_run([_inductor(25.25)], warm), _run([_inductor(3.27)], warm)).metrics[0]
    assert row.mark == "better"
    unknown = manifest()
    del unknown["compile_cache"]
    row = compare(_run([_inductor(25.25)], unknown), _run([_inductor(3.27)], unknown)).metrics[0]
    assert (row.mark, row.reason) == ("not comparable", "compile_cache.state is not recorded in A and B")


# ---------------------------------------------------------------------------- each rule

@pytest.mark.parametrize("spec, a, b, expected", [
    (M.STEP_MS, 1.0, 0.8, "better"), (M.STEP_MS, 1.0, 1.3, "worse"), (M.STEP_MS, 1.0, 1.05, "same"),
    (M.SPEEDUP_VS_EAGER, 2.0, 3.0, "better"), (M.SPEEDUP_VS_EAGER, 2.0, 1.0, "worse"),
    (M.BANDWIDTH_GBPS, 18.3, 4208.0, "better"), (M.GRAPH_BREAKS, 0, 2, "worse"), (M.GRAPH_BREAKS, 2, 0, "better"),
    (M.KERNELS_PER_STEP, 203, 147, "changed"), (M.PREDICTED_SPEEDUP, 1.0, 1.5, "changed"),
    (M.BINDING, "launch", "bandwidth", "changed"), (M.BINDING, "launch", "launch", "same"),
    (M.TOKENS_EQUAL, True, False, "changed"), (M.ROUND_MEDIANS_MS, [1.0, 2.0], [1.0, 2.5], "changed"),
    (M.SAVING_MS_PER_CALL, -0.16, -0.08, "better"), (M.SAVING_MS_PER_CALL, -0.08, -0.16, "worse"),
])
def test_marks_follow_the_declared_direction(spec, a, b, expected) -> None:
    unit = spec.unit
    assert judge(spec, v(a, unit), v(b, unit)).mark == expected


def test_no_direction_is_never_better_or_worse() -> None:
    for spec in M.REGISTRY.values():
        if spec.direction is M.Direction.NONE and spec.kind is M.Kind.NUMBER:
            for a, b in ((1.0, 100.0), (100.0, 1.0), (0, 5)):
                assert judge(spec, v(a, spec.unit), v(b, spec.unit)).mark in ("changed", "not comparable"), spec.name


def test_undeclared_metric_has_no_direction() -> None:
    verdict = judge(None, v(1.0), v(3.0))
    assert verdict.mark == "changed" and "not declared" in verdict.reason


def test_noise_band_and_interquartile_ranges() -> None:
    verdict = judge(M.STEP_MS, v(1.0, spread=(0.7, 1.4)), v(1.3, spread=(1.1, 1.6)))
    assert (verdict.mark, verdict.reason) == ("same", "no 95% interval stored; interquartile ranges overlap")
    assert judge(M.STEP_MS, v(1.0, spread=(0.95, 1.05)), v(1.3, spread=(1.2, 1.4))).mark == "worse"
    assert judge(M.STEP_MS, v(1.0), v(1.3), factor=1.5).mark == "same"


def test_a_value_outside_its_own_samples_is_not_compared_and_a_huge_ratio_stays_short(tmp_path: Path,
                                                                                     capsys) -> None:
    """Issue 30, B12: 1e308 with the spread of 6.091 was 'same' as 6.091 (the spreads overlap) and the ratio printed
    with 300 digits."""
    verdict = judge(M.STEP_MS, v(1e308, spread=(6.0, 6.2)), v(6.091, spread=(6.0, 6.2)))
    assert verdict.mark == "not comparable" and verdict.reason.startswith(
        "A's value 1e+308 lies outside the interquartile range of its own samples [6, 6.2]")
    data = json.loads((CPU_RUN / "results.json").read_text())
    metric = next(m for r in data["experiments"] for m in r["metrics"] if m["spread"] is None
                  and isinstance(m["value"], float) and m["value"] > 0 and M.spec(m["name"]) is not None)
    metric_a, metric["value"] = metric["value"], 1e300
    (tmp_path / "results.json").write_text(json.dumps(data))
    assert lab_main(["compare", str(CPU_RUN), str(tmp_path)]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if " 1e+300 " in line)
    assert len(line) < 300 and line.split(" 1e+300 ", 1)[1].split()[0] == f"{1e300 / metric_a:.3g}", line


def test_comparing_a_run_with_itself_says_so(capsys) -> None:
    """Issue 30: comparing a folder with itself gave no warning."""
    assert lab_main(["compare", str(CPU_RUN), str(CPU_RUN / "results.json")]) == 0
    err = capsys.readouterr().err
    assert err == f"note: A and B are the same file ({CPU_RUN / 'results.json'}): every figure compares with itself\n"


def test_units_kinds_nulls_zero_and_non_finite() -> None:
    assert mark(M.STEP_MS, v(1.0), v(1.0, "s")) == ("not comparable", "units differ: ms vs s")
    assert mark(M.STEP_MS, v(None), v(None))[0] == "same"
    assert mark(M.STEP_MS, v(1.0), v(None))[1] == "B is null (not measured): a value against null"
    assert mark(M.STEP_MS, v(1.0), v(True))[0] == "not comparable"
    assert mark(M.STEP_MS, v(float("nan")), v(1.0)) == ("not comparable", "not a finite number")
    zero = judge(M.GRAPH_BREAKS, v(0, "count"), v(3, "count"))
    assert (zero.mark, zero.ratio) == ("worse", None) and "no ratio" in zero.reason
    assert judge(M.STEP_MS, v(2.0), v(2.0)).ratio == 1.0


def test_profile_condition_model_and_cache_length() -> None:
    tiny = manifest(profile={"model": MODEL | {"n_layer": 2}, "max_len": 256})
    verdict = judge(M.STEP_MS, v(1.0), v(0.1, manifest=tiny))
    assert (verdict.mark, verdict.reason) == ("not comparable", "profile model differs: n_layer: 12 vs 2")
    short = manifest(profile={"model": dict(MODEL), "max_len": 64})
    assert judge(M.STEP_MS, v(1.0), v(0.1, manifest=short)).reason == "profile max_len differs: 256 vs 64"


def test_option_condition_applies_to_its_experiment_only() -> None:
    a = manifest(options={"gemm_bound": {"batch": 256, "dtype": "float32"}})
    b = manifest(options={"gemm_bound": {"batch": 8192, "dtype": "float32"}})
    gemm = judge(M.SPEEDUP, v(0.99, "x", manifest=a, experiment="gemm_bound"),
                 v(0.98, "x", manifest=b, experiment="gemm_bound"))
    assert (gemm.mark, gemm.reason) == ("not comparable", "option gemm_bound.batch differs: 256 vs 8192")
    other = judge(M.SPEEDUP, v(1.0, "x", manifest=a, experiment="diagnose"), v(2.0, "x", manifest=b,
                                                                                  experiment="diagnose"))
    assert other.mark == "better"  # gemm_bound's options say nothing about diagnose's speedup
    # runs made before the manifest held resolved options: the profile's override, else the default
    old = {"profile": {"options": {"launch_overhead": {"n_ops": 100}}}}
    assert option_value(old, "launch_overhead", "n_ops") == 100
    assert option_value(old, "launch_overhead", "width") == DEFAULT == option_value({}, "gemm_bound", "batch")


def test_every_declared_condition_names_something_real() -> None:
    for spec in M.REGISTRY.values():
        for rule in spec.comparable:
            kind, _, what = rule.partition(":")
            if kind == "option":
                experiment, _, key = what.partition(".")
                options = importlib.import_module(BY_ID[experiment].module).Options
                assert key in {f.name for f in dataclasses.fields(options)}, (spec.name, rule)
            elif kind == "metric":
                assert what in M.REGISTRY, (spec.name, rule)
            else:
                assert kind in ("manifest", "profile"), (spec.name, rule)


# ---------------------------------------------------------------------------- two runs

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


def test_why_it_moved_lists_the_explaining_fields_that_differ_first() -> None:
    a = {"torch": {"version": "2.11.0"}, "cpu": {"model": "EPYC", "torch_threads": 2, "caches": {"L2": "512K"}},
         "host": {"load_start": [0.1, 0.1, 0.1], "load_end": [0.2, 0.1, 0.1]}, "compile_cache": {"state": "cold"},
         "gpu": {"nvidia_smi": {"gpus": [{"name": "H200", "driver_version": "580", "clocks.sm": "1980 MHz"}]}},
         "container": {"image": "lab:gpu"}}
    b = copy.deepcopy(a)
    b["host"]["load_end"] = [7.5, 3.0, 1.0]
    b["compile_cache"]["state"] = "warm"
    b["cpu"]["caches"]["L2"] = "1024K"
    b["gpu"]["nvidia_smi"]["gpus"][0]["clocks.sm"] = "345 MHz"
    rows = explain(a, b)
    moved = [(r.label, r.a, r.b) for r in rows if r.differs]
    assert moved == [("CPU caches: L2", "512K", "1024K"), ("host load at end", [0.2, 0.1, 0.1], [7.5, 3.0, 1.0]),
                     ("GPU SM clock", "1980 MHz", "345 MHz"), ("compile cache at start", "cold", "warm")]
    assert [r.differs for r in rows] == sorted((r.differs for r in rows), reverse=True)  # differing ones first
    assert {"GPU", "driver", "torch", "CPU", "torch threads", "image"} <= {r.label for r in rows if not r.differs}


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
    assert [(r.label, r.differs) for r in c.why][0] == ("torch", True)
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
    assert "toolchain" in c.experiments_only_a and c.only_a["toolchain"] == 8  # counted, not dropped
    assert {d.key for d in c.fields} >= {"torch.version", "gpu.nvidia_smi", "host.hostname"}


# ---------------------------------------------------------------------------- the committed reference runs

def _rows(a: str, b: str) -> dict[tuple, object]:
    c = compare(load_side(REFERENCE / a), load_side(REFERENCE / b))
    return {(r.experiment, r.name, json.dumps(r.params, sort_keys=True)): r for r in c.metrics}


def test_the_two_committed_cpu_references() -> None:
    """The inductor-only run of 2026-11-29 against the full cpu run of 2026-12-02, the same host and torch."""
    rows = _rows("cpu-2026-11-29-inductor", "cpu-2026-12-02-full")
    cold = rows[("compile_cost", "first_call_s", '{"n_layer": 12, "phase": "cold", "target": "decode_core"}')]
    assert (cold.a, cold.b, cold.mark) == (pytest.approx(37.73, abs=0.01), pytest.approx(24.78, abs=0.01), "better")
    rel = rows[("inductor", "max_logit_rel_diff", '{"step": "compiled split vs eager", "steps": 40}')]
    assert rel.mark == "not comparable" and rel.reason.startswith("units differ")
    warm = rows[("compile_cost", "break_even_calls", '{"phase": "warm", "target": "decode_core"}')]
    assert (warm.a, warm.b, warm.mark) == (504, 994, "worse")
    never = rows[("compile_cost", "break_even_calls", '{"phase": "cold", "target": "mlp"}')]
    assert (never.a, never.b, never.mark) == (None, None, "same")
    for r in rows.values():  # marked only where the declaration gives a direction
        spec = M.spec(r.name)
        if r.mark in ("better", "worse"):
            assert spec is not None and spec.direction is not M.Direction.NONE, r
        if r.mark == "not comparable":
            assert r.reason, r


def test_an_h200_run_against_a_cpu_run() -> None:
    rows = _rows("cpu-2026-12-02-full", h200_reference().name)
    fusion = rows[("fusion", "step_ms", '{"method": "eager", "n_ops": 4, "residency": "memory"}')]
    assert fusion.mark == "not comparable" and fusion.reason.startswith("bytes_moved differs")
    tflops = rows[("gemm_bound", "achieved_TFLOPs", '{"method": "eager"}')]
    assert tflops.mark == "not comparable" and tflops.reason.startswith("option gemm_bound.batch differs: 256 vs ")
    decode = rows[("amdahl", "measured_speedup", '{"workload": "gpt2_decode_step"}')]
    assert decode.mark == "not comparable" and "amdahl.decode_layers" in decode.reason
    bandwidth = rows[("ceilings", "bandwidth_GBps", '{"kind": "copy"}')]
    assert bandwidth.mark == "better"
    assert all(r.reason for r in rows.values() if r.mark == "not comparable")


# ---------------------------------------------------------------------------- the command line

def test_cli_prints_why_it_moved_fields_and_marks(tmp_path: Path, capsys) -> None:
    assert lab_main(["compare", str(CPU_RUN), str(_gpu_side(tmp_path))]) == 0
    out = capsys.readouterr().out
    why = out.split("Why it moved:", 1)[1].split("Manifest fields that differ:", 1)[0]
    assert "  torch  " in why and "2.13.0+cpu  ->  2.11.0+cu130" in why and "unchanged:" in why
    assert "Manifest fields that differ:" in out and "2.13.0+cpu  ->  2.11.0+cu130" in out
    assert "not comparable  cuda_graph_decode: NOT_RUN -> OK  A: no_cuda" in out
    assert ("not comparable  graph_hazards: NOT_RUN -> FAILED" in out
            and "[A's host could not run it (no_cuda); B's ran it and it failed]" in out)
    assert "graph_breaks.graphs{function=uses_item} [count]" in out
    only_a = next(line for line in out.splitlines() if line.startswith("Experiments only in A:"))
    assert "Metrics only in B: cuda_graph_decode" in out and "toolchain" in [x.strip() for x in only_a.split(":", 1)[1].split(",")]


def test_cli_json_records(tmp_path: Path, capsys) -> None:
    a = REFERENCE / "cpu-2026-11-29-inductor"
    assert lab_main(["compare", str(a), str(REFERENCE / "cpu-2026-12-02-full"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["a"]["path"].endswith("cpu-2026-11-29-inductor/results.json") and data["factor"] == 1.1
    recs = data["records"]
    assert recs and all(set(r) - {"class"} == {"kind", "experiment", "metric", "params", "unit", "a", "b", "ratio",
                                               "mark", "reason"} for r in recs)
    assert all(r["class"] in ("dispatch", "kernel", "other") for r in recs if r["kind"] == "metric")
    rel = next(r for r in recs if r["metric"] == "max_logit_rel_diff" and r["params"]["step"] == "compiled split vs eager")
    assert rel["mark"] == "not comparable" and rel["ratio"] is None and "units differ" in rel["reason"]
    be = next(r for r in recs if r["metric"] == "break_even_calls" and r["params"] == {"phase": "cold",
                                                                                      "target": "decode_core"})
    assert (be["a"], be["b"], be["mark"]) == (4440, 7476, "worse") and be["ratio"] == pytest.approx(7476 / 4440)
    assert data["counts"]["not comparable"] == sum(r["mark"] == "not comparable" for r in recs)
    c = compare(load_side(a), load_side(REFERENCE / "cpu-2026-12-02-full"))
    assert records(c) == json.loads(to_json(c))["records"]


def test_cli_manifest_files(tmp_path: Path, capsys) -> None:
    other = json.loads((CPU_RUN / "manifest.json").read_text())
    other["libraries"]["transformers"] = "4.46.0"
    write_json_atomic(tmp_path / "manifest.json", other)
    assert lab_main(["compare", str(CPU_RUN / "manifest.json"), str(tmp_path / "manifest.json")]) == 0
    out = capsys.readouterr().out
    assert "libraries.transformers" in out and "one side is a manifest only" in out


def test_control_characters_from_a_file_never_reach_the_terminal(tmp_path: Path, capsys) -> None:
    evil = "\x1b[2J\x1b]0;pwned\x07\r\u202e"

    def edit(data: dict) -> None:
        data["manifest"]["torch"]["version"] = f"2.11{evil}"
        rec = data["experiments"][0]
        rec["metrics"][0]["params"]["method"] = f"graph{evil}"
        rec["checks"][0]["detail"] = f"detail{evil}"
        rec["checks"][0]["passed"] = False

    a, b = _gpu_side(tmp_path / "a"), _gpu_side(tmp_path / "b", edit)
    for extra in ([], ["--json"]):
        assert lab_main(["compare", str(a), str(b), *extra]) == 0
        out = capsys.readouterr().out
        assert not any(ch in out for ch in "\x1b\x07\r\u202e"), extra
    assert safe(evil) == "\\x1b[2J\\x1b]0;pwned\\x07\\x0d\\u202e"


@pytest.mark.parametrize("content, expected", [
    ("{oops", "not valid JSON"), ('{"schema": 7, "experiments": []}', "unknown results schema 7"),
    ('{"hello": 1}', "neither a results file"),
    ('{"schema": 1, "run": {"profile": "x\\u001b[31m", "started_at": ""}, "manifest": {"manifest_version": 1}, '
     '"experiments": [{"id": 3, "title": "t", "status": "OK"}]}', "experiments[0].id"),
])
def test_cli_bad_input_one_line(tmp_path: Path, capsys, content: str, expected: str) -> None:
    bad = tmp_path / "results.json"
    bad.write_text(content)
    assert lab_main(["compare", str(CPU_RUN), str(bad)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {bad}") and expected in err[0], err
    assert "\x1b" not in captured.err and captured.out == ""


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


# ---------------------------------------------------------------------------- intervals and status codes

def test_a_values_interval_comes_from_its_spread_or_its_declared_metrics() -> None:
    from lab.contract.results import Spread
    from report.pages.compare import interval_of

    p = {"method": "graph", "batch": 1}
    spread = Spread(n=30, min=0.9, q1=0.95, median=1.0, q3=1.05, max=1.2, rel_iqr=0.1, noisy=False, ci_low=0.97,
                    ci_high=1.03)
    step = Metric("step_ms", 1.0, "ms", p, spread=spread)
    speedup = Metric("speedup_vs_eager", 7.0, "x", p)
    rec = Record(id="cuda_graph_decode", title="", status="OK", metrics=[
        step, speedup, Metric("speedup_ci_low", 6.5, "x", p), Metric("speedup_ci_high", 7.5, "x", p),
        Metric("speedup_ci_low", 1.0, "x", {"method": "graph", "batch": 8})])
    assert interval_of(step, rec) == (0.97, 1.03) and interval_of(speedup, rec) == (6.5, 7.5)
    other = Metric("speedup_vs_eager", 2.0, "x", {"method": "graph", "batch": 8})  # its high end is not stored
    assert interval_of(other, rec) == (None, None)
    assert interval_of(Metric("kernels_per_step", 8, "count", p), rec) == (None, None)


def test_status_changes_are_judged_with_their_reason_codes() -> None:
    from report.pages.compare import status_mark

    assert status_mark("NOT_RUN", "FAILED", "no_cuda")[0] == "not comparable"
    assert status_mark("FAILED", "NOT_RUN", "", "no_cuda")[0] == "not comparable"
    assert status_mark("NOT_RUN", "FAILED", "disabled_in_profile")[0] == "newly failing"
    assert status_mark("OK", "FAILED") == ("newly failing", "OK in A, FAILED in B")
    assert status_mark("FAILED", "OK")[0] == "fixed" and status_mark("OK", "OK")[0] == "same"


# ---------------------------------------------------------------------------- why it moved, ranked by class

def test_figure_classes() -> None:
    from report.pages.why_moved import figure_class

    assert figure_class("step_ms", {"method": "eager", "batch": 1}) == "dispatch"
    assert figure_class("step_ms", {"method": "graph", "batch": 1}) == "kernel"
    assert figure_class("step_ms", {"method": "graph", "batch": 1}, binding="launch") == "dispatch"
    assert figure_class("mbu", {"method": "fused"}, binding="bandwidth") == "kernel"
    for name in ("launch_us_per_op", "speedup_vs_eager", "saving_ms_per_step", "us_per_op"):
        assert figure_class(name, {"method": "graph"}) == "dispatch", name
    for name in ("bandwidth_GBps", "matmul_TFLOPs", "achieved_TFLOPs", "gpu_busy_us"):
        assert figure_class(name, {}) == "kernel", name
    assert figure_class("setup_s", {"method": "graph"}) == "other"
    for name in ("host_index_ms", "host_sensitivity", "speedup_at_reference", "in_run_over_fresh",
                 "in_run_change"):
        assert figure_class(name, {"method": "graph"}) == "dispatch", name
    assert figure_class("step_ms_at_reference", {"method": "eager"}) == "dispatch"
    assert figure_class("step_ms_at_reference", {"method": "graph"}) == "kernel"


def _hosts() -> tuple[dict, dict]:
    a = {"torch": {"version": "2.11.0", "cuda_build": "13.0"}, "libraries": {"triton": "3.5.0"},
         "cpu": {"model": "EPYC 9654", "torch_threads": 16},
         "host": {"load_start": [0.1, 0.1, 0.1], "load_end": [0.2, 0.1, 0.1]},
         "host_dispatch": {"cpu_model": "EPYC 9654", "cpu_mhz": 3700.0, "load_start": [0.1, 0.1, 0.1],
                           "load_end": [0.2, 0.1, 0.1], "launch_us_per_op": 9.5},
         "gpu": {"nvidia_smi": {"gpus": [{"name": "H200", "driver_version": "580"}]}}, "compile_cache": {"state": "warm"}}
    b = copy.deepcopy(a)
    b["torch"]["version"] = "2.12.0"
    b["libraries"]["triton"] = "3.6.0"
    b["gpu"]["nvidia_smi"]["gpus"][0]["driver_version"] = "590"
    b["cpu"]["model"] = b["host_dispatch"]["cpu_model"] = "Xeon 8480"
    b["host_dispatch"].update(cpu_mhz=2000.0, load_start=[9.0, 5.0, 2.0], launch_us_per_op=17.0)
    b["host"]["load_start"] = [9.0, 5.0, 2.0]
    b["compile_cache"]["state"] = "cold"
    return a, b


def test_eager_figures_rank_the_host_dispatch_first_and_kernel_figures_the_gpu_stack() -> None:
    a, b = _hosts()
    dispatch = [r.label for r in explain(a, b, "dispatch") if r.differs]
    assert dispatch[:4] == ["eager launch, measured clean (µs)", "CPU", "CPU clock (MHz)", "host load at start"]
    kernel = [r.label for r in explain(a, b, "kernel") if r.differs]
    assert kernel[:3] == ["driver", "torch", "Triton"]
    assert set(kernel[3:]) == {"CPU", "CPU clock (MHz)", "host load at start", "eager launch, measured clean (µs)",
                               "compile cache at start"}
    assert [r.first for r in explain(a, b, "kernel") if r.differs][:4] == [True, True, True, False]


def test_a_kernel_figure_on_another_card_of_the_same_kind_names_the_card_first() -> None:
    """Two runs on machines of one kind, the same software, different cards (their UUIDs): the card is what differs,
    and a kernel-bound figure's explanation checks it among the first things."""
    a, _ = _hosts()
    b = copy.deepcopy(a)
    a["gpu"]["nvidia_smi"]["gpus"][0]["uuid"] = "GPU-0a1b"
    b["gpu"]["nvidia_smi"]["gpus"][0]["uuid"] = "GPU-9f8e"
    rows = [r for r in explain(a, b, "kernel") if r.differs]
    assert [(r.label, r.first) for r in rows] == [("the card (UUID)", True)]
    assert not [r for r in explain(a, a, "kernel") if r.differs]


def test_host_bound_figures_rank_the_runs_host_index_first_then_placement_then_launch_cost() -> None:
    """The host-speed index each run measured explains an eager move before anything in the manifests; a field only
    one run records comes after every field both record and that differs."""
    from synthetic_runs import STEP, metric, rec, results

    a, b = _hosts()
    b["host_dispatch"]["placement"] = {"bind": "node", "gpu_node": 1}
    a["host_dispatch"]["placement"] = {"bind": "none", "gpu_node": 1}
    ra = results(rec("cuda_graph_decode", [metric("host_index_ms", [15.5, 16.0, 15.8], "ms", method="eager", **STEP)]),
                 rec("ceilings", [metric("launch_us_per_op", 14.3, "us", mode="eager")]))
    rb = results(rec("cuda_graph_decode", [metric("host_index_ms", [28.0, 29.0, 27.5], "ms", method="eager", **STEP)]),
                 rec("ceilings", [metric("launch_us_per_op", 6.3, "us", mode="eager")]))
    a["cpu"]["isa"] = ["avx2"]  # recorded by the older run only
    rows = [r for r in explain(a, b, "dispatch", ra, rb) if r.differs]
    assert [r.label for r in rows[:5]] == ["host-speed index (ms)", "CPU binding (LAB_CPU_BIND)",
                                           "eager launch, measured clean (µs)", "eager launch, ceilings (µs)", "CPU"]
    assert rows[0].a == "15.8 (p5-p95 15.5-16)" and rows[0].b == "28 (p5-p95 27.5-29)"
    assert rows[-1].label == "CPU flags" and rows[-1].b == "(absent)"
    old = results(rec("cuda_graph_decode", []))  # a run without the index: the row says so, ranked after both-sided
    index = next(r for r in explain(a, b, "dispatch", old, rb) if r.label == "host-speed index (ms)")
    assert index.a == "(absent)"


def test_an_older_run_without_host_dispatch_is_read_from_its_cpu_and_host_fields() -> None:
    a, b = _hosts()
    del a["host_dispatch"]
    b = copy.deepcopy(a) | {"host_dispatch": {"cpu_model": "EPYC 9654", "cpu_mhz": 3700.0, "load_start": [0.1, 0.1, 0.1],
                                              "load_end": None, "launch_us_per_op": 9.5}}
    rows = {r.label: r for r in explain(a, b, "dispatch")}
    assert not rows["CPU"].differs and rows["CPU"].a == "EPYC 9654"  # cpu.model against host_dispatch.cpu_model
    assert not rows["host load at start"].differs and not rows["host load at end"].differs  # null: host.load_end
    assert rows["eager launch, measured clean (µs)"].differs and rows["eager launch, measured clean (µs)"].a == "(absent)"


def test_a_comparison_ranks_why_for_each_class_that_moved(tmp_path: Path) -> None:
    def slower(data: dict) -> None:
        for m in data["experiments"][0]["metrics"]:
            if m["name"] == "step_ms" and m["params"]["batch"] == 1 and m["params"]["method"] in ("eager", "graph",
                                                                                               "compile+graph"):
                m["value"] *= 3
                m["spread"] = None
        for m in next(r for r in data["experiments"] if r["id"] == "ceilings")["metrics"]:
            if m["name"] == "binding" and m["params"] == {"method": "graph", "batch": 1, "dtype": "float32"}:
                m["value"] = "bandwidth"  # graph replay at B=1 kernel-bound; compile+graph stays launch-bound
        data["manifest"]["cpu"]["model"] = "another CPU"
        data["manifest"]["gpu"]["nvidia_smi"]["gpus"][0]["driver_version"] = "999.1"

    c = compare(load_side(_gpu_side(tmp_path / "a")), load_side(_gpu_side(tmp_path / "b", slower)))
    step = {r.params["method"]: r for r in c.moved if r.name == "step_ms" and r.experiment == "cuda_graph_decode"
            and r.params["dtype"] == "float32"}
    assert (step["eager"].cls, step["graph"].cls, step["compile+graph"].cls) == ("dispatch", "kernel", "dispatch")
    assert c.why_by_class["dispatch"][0].label == "CPU" and c.why_by_class["kernel"][0].label == "driver"
    assert c.why is c.why_by_class["dispatch"]  # the class with the most figures that moved leads
    text = format_text(c)
    assert "for the 2 kernel-bound figures: the GPU, driver, torch, CUDA and Triton first: driver 580.159.04 -> 999.1; CPU" in text
    assert "eager and launch-bound figures: the host's dispatch first: CPU fixture CPU -> another CPU; driver" in text
    data = json.loads(to_json(c))
    assert data["why_it_moved_by_class"]["dispatch"]["ranked"][0]["label"] == "CPU"
    assert {r["class"] for r in data["records"] if r["kind"] == "metric"} >= {"dispatch"}


# ---------------------------------------------------------------------------- every run's baseline (the report)

def test_every_committed_reference_gets_a_baseline_or_the_sentence_why() -> None:
    from report.site.discover import load_runs
    from report.site.build import baselines

    runs, _ = load_runs([REFERENCE])
    got = {b.run.name: (b.base.name if b.base else None, b.why) for b in baselines(runs)}
    assert set(got) == {r.name for r in runs}
    assert got["cpu-2026-12-02-full"] == ("cpu-2026-11-29-inductor", "the previous run of host vm (AMD EPYC, 2 cores) "
                                                                      "with profile cpu")
    assert got["cpu-2026-11-29-inductor"][0] == "cpu-2026-12-02-full"
    h200 = "host vm (Intel(R) Xeon(R) Processor, 16 cores; NVIDIA H200, driver 580.159.04) with profile gpu"
    assert got["h200-2026-12-04-model-scaling"] == ("h200-2026-12-02-gpu", f"the previous run of {h200}")
    assert got["h200-2026-12-04-model-scaling-pairs"] == ("h200-2026-12-04-model-scaling", f"the previous run of {h200}")
    assert got["h200-2026-12-04-model-scaling-input-layout"] == ("h200-2026-12-04-model-scaling-pairs",
                                                               f"the previous run of {h200}")
    assert got["h200-2026-12-04-model-scaling-ln-fold"] == ("h200-2026-12-04-model-scaling-input-layout",
                                                          f"the previous run of {h200}")
    # a grid is set against the previous grid, past the two anatomy runs made between them (report.site.build._sharing)
    assert got["h200-2026-12-04-model-scaling-fp32-tiles"] == ("h200-2026-12-04-model-scaling-ln-fold",
                                                             f"the previous run of {h200}")
    # an anatomy run against the previous anatomy; the first one, with none before it, against the previous run
    anatomy = "h200-2026-12-04-fused-anatomy-"
    assert got[anatomy + "124M-step"] == ("h200-2026-12-04-model-scaling-ln-fold", f"the previous run of {h200}")
    assert got[anatomy + "1.5B-step"] == (anatomy + "124M-step", f"the previous run of {h200}")
    assert got[anatomy + "124M-waits"] == (anatomy + "1.5B-step", f"the previous run of {h200}")
    assert got[anatomy + "1.5B-waits"] == (anatomy + "124M-waits", f"the previous run of {h200}")
    assert got["h200-2026-12-04-model-scaling-head-major"] == ("h200-2026-12-04-model-scaling-fp32-tiles",
                                                             f"the previous run of {h200}")
    assert got[anatomy + "1.5B-head-major"] == (anatomy + "1.5B-waits", f"the previous run of {h200}")
    # a grid of three methods against the previous grid of five: what they share is compared
    assert got["h200-2026-12-04-model-scaling-evict"] == ("h200-2026-12-04-model-scaling-head-major",
                                                        f"the previous run of {h200}")
    assert got["h200-2026-12-05-model-scaling-kv-l2"] == ("h200-2026-12-04-model-scaling-evict",
                                                        f"the previous run of {h200}")
    assert got["h200-2026-12-05-model-scaling-lm-head"] == ("h200-2026-12-05-model-scaling-kv-l2",
                                                          f"the previous run of {h200}")
    assert got["h200-2026-12-05-model-scaling-lm-argmax"] == ("h200-2026-12-05-model-scaling-lm-head",
                                                            f"the previous run of {h200}")
    # made after lm-argmax's grid on another H200: the anatomy against the previous anatomy, the grid past the two
    assert got["h200-2026-12-05-fused-anatomy-124M"] == (anatomy + "1.5B-head-major", f"the previous run of {h200}")
    assert got["h200-2026-12-05-fused-anatomy-1.5B"] == ("h200-2026-12-05-fused-anatomy-124M",
                                                         f"the previous run of {h200}")
    assert got["h200-2026-12-05-model-scaling-main"] == ("h200-2026-12-05-model-scaling-lm-argmax",
                                                       f"the previous run of {h200}")
    # the H200's grid of 2026-12-06 (a third card), against the H200's grid before it
    assert got["h200-2026-12-06-model-scaling"] == ("h200-2026-12-05-model-scaling-main", f"the previous run of {h200}")
    # another host's first run: no run of its own host before it, so the newest other run of its profile that shares
    # its experiment (the newest grid of the profile: the H200's second of 2026-12-07, made after the H100's of that day)
    h100 = "host vm (Intel(R) Xeon(R) Processor, 16 cores; NVIDIA H100 80GB HBM3, driver 580.159.04) with profile gpu"
    assert got["h100-2026-12-05-model-scaling"] == ("h200-2026-12-07-model-scaling-second-card",
                                                    f"no earlier run of {h100}: the newest other run of profile gpu")
    # the H200's grid of 2026-12-07 (a fourth card) against the H200's grid before it, past every H100 run between them;
    # the same day's second (a fifth card) against it
    assert got["h200-2026-12-07-model-scaling"] == ("h200-2026-12-06-model-scaling", f"the previous run of {h200}")
    assert got["h200-2026-12-07-model-scaling-second-card"] == ("h200-2026-12-07-model-scaling",
                                                                f"the previous run of {h200}")
    # the H100's grid of 2026-12-07 against the host's previous grid, past its whole gpu profile (which ran no grid)
    assert got["h100-2026-12-07-model-scaling"] == ("h100-2026-12-06-model-scaling-sum-once",
                                                    f"the previous run of {h100}")
    # the H100's second grid, against its first, past the two anatomy runs made between them; the third (one size and
    # dtype of the grid) against the second: what they share is compared
    assert got["h100-2026-12-06-model-scaling"] == ("h100-2026-12-05-model-scaling", f"the previous run of {h100}")
    assert got["h100-2026-12-06-model-scaling-sum-once"] == ("h100-2026-12-06-model-scaling",
                                                             f"the previous run of {h100}")
    # the H100's anatomy runs, made after its grid: the first against that grid (no anatomy of the host before it)
    assert got["h100-2026-12-05-fused-anatomy-124M"] == ("h100-2026-12-05-model-scaling", f"the previous run of {h100}")
    assert got["h100-2026-12-05-fused-anatomy-1.5B"] == ("h100-2026-12-05-fused-anatomy-124M",
                                                         f"the previous run of {h100}")
    # the H100's whole gpu profile (2026-12-06, by the offline route) after its last grid
    assert got["h100-2026-12-06-gpu"] == ("h100-2026-12-06-model-scaling-sum-once", f"the previous run of {h100}")
    # no earlier run of its own host: among the profile's other runs those that ran one of its experiments come first
    # (`_sharing`), so the H100's whole gpu profile, not the H200's later grid, which ran none of them
    assert got["h200-2026-12-02-gpu"] == ("h100-2026-12-06-gpu",
                                          f"no earlier run of {h200}: the newest other run of profile gpu")
    assert got["h200-2026-12-02-sweep"] == (None, "no other run of profile gpu-sweep among the runs rendered: nothing "
                                                  "to set it against (a run of the same profile, from this host or "
                                                  "another, would be)")


def test_a_baseline_is_the_previous_run_of_the_host_else_the_newest_of_the_profile(tmp_path: Path) -> None:
    from report.site.discover import load_runs
    from report.site.build import baselines

    def run(name: str, host: str, day: int, profile: str = "gpu") -> None:
        data = gpu_fixture.build()
        data["run"]["started_at"] = f"2026-11-{day:02d}T09:00:00+00:00"
        data["run"]["profile"] = profile
        data["manifest"]["host"]["real_hostname"] = host
        write_json_atomic(tmp_path / name / "results.json", data)

    run("a1", "alpha", 1), run("b1", "beta", 2), run("a2", "alpha", 3), run("a3", "alpha", 4), run("x", "beta", 5, "cpu")
    runs, _ = load_runs([tmp_path])
    got = {b.run.name: (b.base.name if b.base else None) for b in baselines(runs)}
    assert got == {"a3": "a2", "a2": "a1", "a1": "a3", "b1": "a3", "x": None}
    why = {b.run.name: b.why for b in baselines(runs)}
    machine = "(fixture CPU, 16 cores; NVIDIA H200 (test fixture), driver 580.159.04)"
    assert why["b1"] == f"no other run of host beta {machine} with profile gpu: the newest other run of profile gpu"
    assert why["a1"].startswith(f"no earlier run of host alpha {machine}")
    run("a4-epyc", "alpha", 6)  # the same hostname on another machine: not alpha's previous run
    data = json.loads((tmp_path / "a4-epyc" / "results.json").read_text())
    data["manifest"]["cpu"]["model"] = "AMD EPYC 9654"
    write_json_atomic(tmp_path / "a4-epyc" / "results.json", data)
    runs, _ = load_runs([tmp_path])
    epyc = next(b for b in baselines(runs) if b.run.name == "a4-epyc")
    assert epyc.why.startswith("no other run of host alpha (AMD EPYC 9654, 16 cores;") and epyc.base is not None
    assert next(b for b in baselines(runs) if b.run.name == "a3").base.name == "a2"
    runs = [r for r in runs if r.name != "a4-epyc"]
    fixed = {b.run.name: (b.base.name if b.base else None) for b in baselines(runs, "a1")}
    assert fixed == {"a3": "a1", "a2": "a1", "b1": "a1", "x": "a1", "a1": None}


def test_two_machines_that_share_a_hostname_are_told_apart_in_the_comparison() -> None:
    a, b = _hosts()
    a["host"]["real_hostname"] = b["host"]["real_hostname"] = "vm"
    c = compare(Side(Path("a"), a, None), Side(Path("b"), b, None))
    lines = format_text(c).splitlines()
    assert "host vm (EPYC 9654, ? cores; H200, driver 580)" in lines[0]
    assert "host vm (Xeon 8480, ? cores; H200, driver 590)" in lines[1]
