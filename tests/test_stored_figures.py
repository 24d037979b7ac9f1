"""Derived figures are computed once, in the experiment, and stored: cuda_graph_decode's break-even per method,
amdahl's launch-aware prediction (checked on the committed H200 reference run), compile_cost's first calls
recorded once; and the manifest's additions (label, real hostname, host load, CPU flags and caches, the
compile cache's state)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from lab.host import hostinfo
from lab.contract import profiles
from lab.contract import metrics as M
from lab.__main__ import main as lab_main
from lab.contract.catalogue import BY_ID
from lab.experiments import amdahl, compile_cost, cuda_graph_decode
from lab.run.manifest import finish
from lab.contract.names import Method
from lab.contract.results import Metric, Record, load
from lab.run.context import Context
from report_helpers import h200_reference

DECODE = "gpt2_decode_step"



def _ctx(experiment: str, record: Record, results: object = None) -> Context:
    return Context(BY_ID[experiment], profiles.get("smoke"), None, record, results or SimpleNamespace(experiments=[]),
                   None)


# ---------------------------------------------------------------------------- amdahl's launch term

def test_launch_aware_prediction_on_the_h200_reference_run() -> None:
    """The batch-1 decode step on the H200: Amdahl alone predicts 1.00x against 1.53x measured; priced launches
    (the same run's ceilings: 11.9 us per eager launch, 203 -> 147 kernels) bring the prediction within 25%."""
    run = load(h200_reference())
    rec, cgd = run.record("amdahl"), run.record("cuda_graph_decode")
    f = rec.metric(M.FUSIBLE_FRACTION.name, workload=DECODE).value
    k = rec.metric(M.K.name, workload=DECODE).value
    n_eager = rec.metric(M.KERNELS.name, workload=DECODE, method=Method.EAGER).value
    p = {"batch": 1, "dtype": "float32"}
    n_compiled = cgd.metric(M.KERNELS_PER_STEP.name, method=Method.COMPILE_DEFAULT, **p).value
    kernel_us = cgd.metric(M.KERNEL_TIME_PER_STEP_US.name, method=Method.EAGER, **p).value
    launch_us = amdahl.launch_cost_us(run.experiments)
    measured = rec.metric(M.MEASURED_SPEEDUP.name, workload=DECODE).value
    fusion_only = amdahl.predicted_speedup(f, k)
    launch_aware = amdahl.launch_aware_speedup(n_eager, n_compiled, launch_us, kernel_us, f, k)
    assert abs(fusion_only - measured) > 0.25 * measured  # the miss the issue reports
    assert abs(launch_aware - measured) <= 0.25 * measured, (launch_aware, measured)
    assert fusion_only < launch_aware
    stored = [m for m in rec.metrics if m.name == M.PREDICTED_SPEEDUP_LAUNCH.name and m.params.get("workload") == DECODE]
    if stored:  # a run made by this lab version stores its own prediction (its kernel time from amdahl's profile)
        assert abs(stored[0].value - measured) <= 0.25 * measured, (stored[0].value, measured)


def test_launch_aware_prediction_is_amdahls_with_free_launches() -> None:
    for f, k in ((0.0, 3.0), (0.43, 1.0), (0.6, 4.0), (1.0, 2.0)):
        assert amdahl.launch_aware_speedup(203, 147, 0.0, 624.0, f, k) == pytest.approx(amdahl.predicted_speedup(f, k))
    # fewer launches predict more, more launches less
    assert amdahl.launch_aware_speedup(200, 100, 10.0, 500.0, 0.5, 2.0) > amdahl.predicted_speedup(0.5, 2.0)
    assert amdahl.launch_aware_speedup(100, 200, 10.0, 500.0, 0.5, 2.0) < amdahl.predicted_speedup(0.5, 2.0)
    with pytest.raises(ValueError):
        amdahl.launch_aware_speedup(1, 1, -1.0, 1.0, 0.5, 2.0)


def test_amdahl_stores_both_predictions_from_the_runs_ceilings() -> None:
    ceilings = Record("ceilings", "c", "OK", metrics=[Metric("launch_us_per_op", 10.0, "us", {"mode": "eager"})])
    record = Record("amdahl", "a", "OK")
    ctx = _ctx("amdahl", record, SimpleNamespace(experiments=[ceilings]))
    amdahl._launch_aware(ctx, DECODE, 200, 100, 1000.0, 0.5, 2.0, 1.8)
    got = {m.name: m.value for m in record.metrics}
    expected = (200 * 10 + 1000) / (100 * 10 + 1000 * 0.75)
    assert got[M.PREDICTED_SPEEDUP_LAUNCH.name] == pytest.approx(expected)
    assert got[M.MEASURED_OVER_PREDICTED_LAUNCH.name] == pytest.approx(1.8 / expected)
    assert got[M.LAUNCH_US_PER_OP.name] == 10.0
    bare = Record("amdahl", "a", "OK")
    amdahl._launch_aware(_ctx("amdahl", bare), DECODE, 200, 100, 1000.0, 0.5, 2.0, 1.8)
    assert not bare.metrics and bare.skipped[0].code == "not_measured" and "ceilings" in bare.skipped[0].message


# ---------------------------------------------------------------------------- cuda_graph_decode's break-even

def test_cuda_graph_decode_stores_saving_and_break_even_per_method() -> None:
    record = Record("cuda_graph_decode", "c", "OK")
    p = {"batch": 1, "dtype": "bfloat16"}
    for method, ms, setup in ((Method.EAGER, 4.0, None), (Method.GRAPH, 0.5, 0.35), (Method.COMPILE_DEFAULT, 4.5, 20.0)):
        record.metrics.append(Metric("step_ms", ms, "ms", {"method": method, **p, "readback": False}))
        record.metrics.append(Metric("step_ms", ms + 1, "ms", {"method": method, **p, "readback": True}))
        if setup is not None:
            record.metrics.append(Metric("setup_s", setup, "s", {"method": method, **p}))
    from types import SimpleNamespace

    built = {m: SimpleNamespace(compiled_by=None) for m in (Method.EAGER, Method.GRAPH, Method.COMPILE_DEFAULT)}
    cuda_graph_decode._record_break_even(_ctx("cuda_graph_decode", record), built, 1, "bfloat16")
    got = {(m.name, m.params["method"]): m.value for m in record.metrics if m.name in ("saving_ms_per_step",
                                                                                       "break_even_steps")}
    assert got == {("saving_ms_per_step", Method.GRAPH): 3.5, ("break_even_steps", Method.GRAPH): 100,
                   ("saving_ms_per_step", Method.COMPILE_DEFAULT): -0.5,
                   ("break_even_steps", Method.COMPILE_DEFAULT): None}  # slower than eager: it never pays


def test_compile_cost_records_each_first_call_once(monkeypatch) -> None:
    def child(first: float) -> dict:
        return {"first_call_s": first, "counters": {"fxgraph_cache_hit": 0, "fxgraph_cache_miss": 1},
                "shapes": {"x": [1]}, "steady": {"eager": [2.0], "compile-default": [1.0]}, "threads": 1,
                "fx_graph_cache": True}

    monkeypatch.setattr(compile_cost, "_cold_warm", lambda ctx, root, target, n, tag: (child(10.0 + n), child(1.0 + n),
                                                                                        root))
    monkeypatch.setattr(compile_cost, "_child", lambda *a, **kw: child(5.0))
    monkeypatch.setattr(compile_cost, "provenance", lambda *a, **kw: {})
    record = Record("compile_cost", "c", "OK")
    ctx = _ctx("compile_cost", record)
    ctx.options = compile_cost.Options(depths=(1, 2), mlp_trials=0)
    compile_cost.run(ctx)
    keys = [json.dumps(m.params, sort_keys=True) for m in record.metrics if m.name == "first_call_s"]
    assert len(keys) == len(set(keys)) == 4  # cold and warm at depths 1 and 2 (2, the model's, recorded once)


# ---------------------------------------------------------------------------- the manifest's additions

def test_host_facts(tmp_path: Path, monkeypatch) -> None:
    for i, (level, kind, size) in enumerate(((1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"))):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert hostinfo.cpu_caches(tmp_path) == {"L1d": "48K", "L1i": "32K", "L2": "2048K"}
    assert hostinfo.cpu_caches(tmp_path / "absent") is None
    assert hostinfo.cpu_flags("processor : 0\nflags\t\t: fpu avx2 avx512f amx_bf16\n") == ["fpu", "avx2", "avx512f",
                                                                                          "amx_bf16"]
    assert hostinfo.cpu_flags("Features\t: fp asimd sve\n") == ["fp", "asimd", "sve"]
    assert hostinfo.cache_state(tmp_path / "none") == {"state": "cold", "entries": 0}
    assert hostinfo.cache_state(tmp_path) == {"state": "warm", "entries": 9}
    monkeypatch.setenv("LAB_HOSTNAME", "h200-rack-3")
    assert hostinfo.host_info()["real_hostname"] == "h200-rack-3"
    load_avg = hostinfo.load_average()
    assert load_avg is None or (len(load_avg) == 3 and all(x >= 0 for x in load_avg))
    manifest: dict = {"host": {"hostname": "vm"}}
    finish(manifest)
    assert len(manifest["host"]["load_end"]) == 3  # Linux has load averages


def test_a_run_records_label_load_and_cache_state(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("LAB_LABEL", raising=False)
    out = tmp_path / "run"
    assert lab_main(["run", "--profile", "smoke", "--only", "recompiles", "--out", str(out), "--label",
                     "h200 after the driver update"]) == 0
    results = json.loads((out / "results.json").read_text())
    m = results["manifest"]
    assert m["label"] == "h200 after the driver update"
    assert m["host"]["real_hostname"] and len(m["host"]["load_start"]) == 3 and len(m["host"]["load_end"]) == 3
    assert m["compile_cache"]["state"] in ("cold", "warm") and isinstance(m["compile_cache"]["entries"], int)
    assert m["cpu"]["caches"] is None or all(isinstance(v, str) for v in m["cpu"]["caches"].values())
    load(out)  # the schema accepts the new fields
