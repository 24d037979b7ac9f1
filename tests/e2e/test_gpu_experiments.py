"""Every GPU experiment's code path, on the smoke profile's tiny model, through the runner, on CUDA.

Skipped with a reason where torch sees no CUDA device. On a CUDA host (the H200):

    python -m pytest -q -p no:cacheprovider -m cuda            # every CUDA test of the suite
    python -m pytest -q -p no:cacheprovider tests/e2e/test_gpu_experiments.py

The profile is `smoke` moved to CUDA with fewer steps and rounds: the point is that every method and
every experiment runs there and its record is OK with its checks passed, not the numbers.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from lab.contract import metrics as M
from lab.contract import profiles
from lab.run import runner
from lab.experiments.cuda_graph_decode import BF16_METHODS, DEFAULT_METHODS, READBACK_METHODS
from lab.contract.names import Method, Variant
from lab.contract.results import Record, Results, load

pytestmark = [pytest.mark.cuda, pytest.mark.cuda_e2e]

STEPS, ROUNDS, BATCHES = 8, 2, (1, 2)


def cuda_tiny():
    p = replace(profiles.get("smoke"), name="cuda-tiny", description="the smoke profile on CUDA (tests)", device="cuda",
                decode_steps=STEPS, rounds=ROUNDS, warmup=1, batches=BATCHES)
    p = p.with_options("cuda_graph_decode", steps=STEPS, rounds=ROUNDS, bf16_batches=[1])
    p = p.with_options("ceilings", copy_bytes=64 << 20, matmul_n_fp32=1024, matmul_n_bf16=1024, steps=STEPS)
    return p.with_options("manual_graph_recipe", warmup=3, iters=20)


def ok(rec: Record) -> Record:
    """The record, asserted OK with every fatal check passed (the failure says why not)."""
    failed = [f"{c.name}: {c.detail}" for c in rec.checks if c.fatal and not c.passed]
    assert rec.status == "OK" and not failed, (rec.id, rec.status, rec.reason, (rec.error or {}).get("traceback"),
                                               failed)
    return rec


def run(tmp_path: Path, ids: list[str], profile=None) -> Results:
    res = runner.run(profile or cuda_tiny(), tmp_path, only=ids)
    assert sorted(r.id for r in res.experiments) == sorted(ids)
    assert load(tmp_path).run.state == "complete"
    return res


def named(rec: Record, name: str, **params) -> list:
    return [m for m in rec.metrics if m.name == name and all(m.params.get(k) == v for k, v in params.items())]


def test_decode_step_every_method_then_its_capture_cost_and_bounds(tmp_path: Path) -> None:
    res = run(tmp_path, ["cuda_graph_decode", "graph_cost", "ceilings"])
    dec = ok(res.record("cuda_graph_decode"))
    for batch in BATCHES:
        for m in DEFAULT_METHODS:  # eager, graph, compile-default, reduce-overhead(-static), compile+graph
            step = dec.metric(M.STEP_MS.name, method=m, batch=batch, dtype="float32", readback=False)
            assert step.value > 0 and step.spread.n == ROUNDS * STEPS, (m, batch, step)
            assert dec.metric(M.TOKENS_EQUAL.name, method=m, batch=batch, dtype="float32").value is True, (m, batch)
            assert dec.metric(M.KERNELS_PER_STEP.name, method=m, batch=batch, dtype="float32").value > 0
            assert dec.metric(M.CORRECT.name, method=m, batch=batch, dtype="float32").value is True, (m, batch)
            assert step.spread.ci_low is not None and step.spread.ci_low <= step.spread.ci_high
            if m != Method.EAGER:  # every speedup with its interval (a bootstrap over the rounds)
                p = dict(method=m, batch=batch, dtype="float32", readback=False)
                low, high = (dec.metric(n.name, **p).value for n in (M.SPEEDUP_CI_LOW, M.SPEEDUP_CI_HIGH))
                assert low is not None and low <= high, (m, batch, low, high)
        for m in READBACK_METHODS:
            assert dec.metric(M.STEP_MS.name, method=m, batch=batch, dtype="float32", readback=True).value > 0
        assert dec.metric(M.RECOMPILES_DURING_TIMING.name, batch=batch, dtype="float32").value == 0
    bf16 = {m.params["method"] for m in named(dec, M.STEP_MS.name, dtype="bfloat16", batch=1)}
    assert bf16 == set(BF16_METHODS)
    assert Method.MAX_AUTOTUNE in [s.item for s in dec.skipped]

    cost = ok(res.record("graph_cost"))
    for name in (M.CAPTURE_S.name, M.GRAPH_POOL_MIB.name, M.BREAK_EVEN_STEPS.name):
        assert len(named(cost, name)) >= len(BATCHES), (name, cost.metrics)
    assert all(m.value > 0 for m in named(cost, M.CAPTURE_S.name))

    bounds = ok(res.record("ceilings"))
    assert bounds.notes["step_source"] == "cuda_graph_decode"
    assert named(bounds, M.LAUNCH_US_PER_OP.name) and named(bounds, M.BANDWIDTH_GBPS.name)
    for m in DEFAULT_METHODS:
        row = dict(method=m, batch=1, dtype="float32")
        assert bounds.metric(M.BINDING.name, **row).value in ("launch", "bandwidth", "compute")
        assert bounds.metric(M.BOUND_MS.name, **row).value > 0


def test_graph_hazards_kill_their_children_not_the_run(tmp_path: Path) -> None:
    res = run(tmp_path, ["graph_hazards", "toolchain"])
    hz = ok(res.record("graph_hazards"))
    assert hz.metric(M.CHILD_DIED.name, method=Method.GRAPH, device="cuda").value is True
    assert hz.metric(M.GUARD_RAISED.name, method="GraphedStep").value is True
    assert hz.metric(M.REPLACED_INPUT_TOKENS_EQUAL_UNTOUCHED.name).value is True
    assert ok(res.record("toolchain"))  # the run went on after the children's device-side asserts


def test_manual_graph_recipe(tmp_path: Path) -> None:
    rec = ok(run(tmp_path, ["manual_graph_recipe"]).record("manual_graph_recipe"))
    for m in (Method.EAGER, Method.GRAPH, Variant.GRAPH_NO_CLONE):
        assert rec.metric(M.STEP_MS.name, method=m).value > 0
    assert rec.metric(M.CAPTURE_S.name).value > 0 and rec.metric(M.SPEEDUP.name, method=Method.GRAPH).value > 0


def test_the_compiled_experiments_on_cuda(tmp_path: Path) -> None:
    """Inductor through Triton: the experiments that compile, on CUDA, then selection over their records."""
    ids = ["inductor", "graph_break_repair", "fusion", "launch_overhead", "allocation", "gemm_bound", "amdahl",
           "diagnose", "selection"]
    res = run(tmp_path, ids)
    for rec in res.experiments:
        ok(rec)
    ind = res.record("inductor")
    assert any(m.params.get("method") == Method.COMPILE_DEFAULT for m in named(ind, M.STEP_MS.name))


@pytest.mark.slow
def test_compile_cost_children_on_cuda(tmp_path: Path) -> None:
    rec = ok(run(tmp_path, ["compile_cost"]).record("compile_cost"))
    for phase in ("cold", "warm"):
        assert named(rec, M.FIRST_CALL_S.name, phase=phase, target="decode_core"), phase


@pytest.mark.slow
def test_max_autotune_method(tmp_path: Path) -> None:
    profile = cuda_tiny().with_options("cuda_graph_decode", max_autotune=True, methods=["eager"], batches=[1],
                                       bf16_batches=[], readback=[False])
    rec = ok(run(tmp_path, ["cuda_graph_decode"], profile).record("cuda_graph_decode"))
    assert rec.metric(M.STEP_MS.name, method=Method.MAX_AUTOTUNE, batch=1, dtype="float32", readback=False).value > 0
    assert rec.metric(M.TOKENS_EQUAL.name, method=Method.MAX_AUTOTUNE, batch=1, dtype="float32").value is True
