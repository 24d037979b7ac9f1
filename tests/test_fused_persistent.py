"""The persistent layer kernel (lab.step.fused.persistent, lab.step.fused.grid) and its experiment
(lab.experiments.fused_persistent): the grids a device holds, what the parent records from its child's
measurement, a hang that fails the experiment with the watchdog's words, NOT_RUN without CUDA and never in a
default run, the barrier compiled for sm_90; and (`cuda` marker) the kernel on a GPU, in a child process with a
watchdog, bit-identical to the five-kernel step. The interpreter runs it against eager and the five-kernel step:
tests/test_fused_interpreter.py, cases `persistent-*`."""

from __future__ import annotations

import os
import statistics
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from lab.contract import catalogue, profiles
from lab.experiments import fused_persistent as FP
from lab.step.fused import triton_import_error

TRITON_MISSING = triton_import_error()


def test_occupancy_is_the_tightest_of_registers_shared_memory_and_warps() -> None:
    from lab.step.fused.persistent import occupancy

    assert occupancy(122, 4096, 8) == 2  # 122 regs -> 3,968 a warp (in 256s): 65,536 // (3,968 x 8)
    assert occupancy(32, 0, 4) == 16  # warps: 64 // 4
    assert occupancy(32, 100 * 1024, 4) == 2  # shared memory: 228 KiB // 100 KiB
    assert occupancy(255, 0, 16) == 0  # 255 registers x 512 threads do not fit one SM


def test_wide_tiles_give_each_phase_at_most_one_task_a_program_within_the_tile_budget() -> None:
    from lab.step.fused import configs as C
    from lab.step.fused.persistent import wide_configs

    for E, batch, programs in ((768, 1, 132), (768, 1, 264), (1600, 1, 264), (768, 3, 132)):
        tiles = wide_configs(E, 50257, batch, programs, num_warps=8, per_thread=16)
        assert set(tiles) == {"ln_qkv", "proj", "ln_fc", "fc2"}
        for name, g in tiles.items():
            N, K = C.gemv_shapes(E, 50257)[name]
            assert C.cdiv(N, g.BN) * C.cdiv(batch, g.BB) <= programs, (name, g)  # at most one task a program
            assert C.cdiv(N, g.BN // 2 or 1) * C.cdiv(batch, g.BB) > programs or g.BN == 1  # the smallest BN that does
            assert g.BB * g.BN * g.BK <= 16 * 32 * 8 and g.BK <= C.next_pow2(K), (name, g)


def test_by_name_only_and_not_run_without_cuda(tmp_path: Path) -> None:
    from lab.run import runner

    assert "fused_persistent" not in {s.id for s in catalogue.resolve(None, sweeps=True)}
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    rec = runner.run(profiles.get("gpu"), tmp_path, only=["fused_persistent"]).record("fused_persistent")
    assert rec.status == "NOT_RUN" and rec.reason.code == "no_cuda" and "NVIDIA" in rec.reason.message, rec


class Recorder:
    """What an experiment asks of its context, kept in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def skip(self, item: str, code: Any, message: str) -> None:
        self.calls.append(("skip", item, str(code), message))

    def check(self, name: str, ok: bool, detail: str = "", fatal: bool = True, **p: Any) -> bool:
        self.calls.append(("check", name, bool(ok), fatal, p.get("variant")))
        return ok

    def metric(self, spec: Any, value: Any, **p: Any) -> None:
        self.calls.append(("metric", spec.name, value, p.get("variant")))

    def timing(self, spec: Any, rounds: Any, **p: Any) -> None:
        self.calls.append(("timing", spec.name, rounds, p.get("variant")))

    def note(self, key: str, value: Any) -> None:
        self.calls.append(("note", key, value))

    def got(self, kind: str, name: str) -> dict[Any, Any]:
        return {c[3] if kind in ("metric", "timing") else c[4]: c[2] for c in self.calls if c[:2] == (kind, name)}


def _value(diffs: list[float]) -> dict[str, Any]:
    rounds = {"fused": [[0.30, 0.31], [0.30, 0.30], [0.31, 0.32]],
              "fused-pdl-prefetch": [[0.25, 0.25], [0.24, 0.26], [0.25, 0.25]],
              "fused-persistent-132": [[0.20, 0.21], [0.20, 0.20], [0.21, 0.20]]}
    five = [{"logit_diff": d, "logit_scale": 10.0, "identical": d == 0, "tokens_equal": True} for d in diffs]
    check = {"five": five, "tokens_equal": True, "replay_identical": True, "max_logit_diff": 1e-6, "launches": 14}
    return {"not_run": [{"item": "gpt2-124M float32 batch 1, 264 programs", "code": "not_on_this_device",
                         "reason": "the device holds 132 programs"}],
            "cases": [{"size": "gpt2-124M", "dtype": "float32", "batch": 1, "max_programs": 132,
                       "occupancy": "122 registers", "checks": {"fused-persistent-132": check}, "rounds": rounds,
                       "launches": {"fused": 62, "fused-pdl-prefetch": 62, "fused-persistent-132": 14},
                       "bytes": 500_000_000}]}


def test_the_parent_records_checks_timings_speedup_over_the_faster_five_kernel_variant_and_mbu() -> None:
    ctx = Recorder()
    FP.record(ctx, _value([0.0, 1e-5, 0.0, 2e-5]), bandwidth=4000.0)
    assert [c for c in ctx.calls if c[0] == "skip"] == [
        ("skip", "gpt2-124M float32 batch 1, 264 programs", "not_on_this_device", "the device holds 132 programs")]
    checks = [c for c in ctx.calls if c[0] == "check"]
    assert len(checks) == 3 and all(ok and fatal for _, _, ok, fatal, _ in checks), checks
    assert set(ctx.got("timing", "step_ms")) == {"fused", "fused-pdl-prefetch", "fused-persistent-132"}
    speedup = ctx.got("metric", "speedup_vs_fused")["fused-persistent-132"]  # over fused-pdl-prefetch, the faster
    assert speedup == pytest.approx(0.25 / statistics.median([0.20, 0.21, 0.20, 0.20, 0.21, 0.20]), abs=1e-4)
    low, high = (ctx.got("metric", f"speedup_vs_fused_ci_{e}")["fused-persistent-132"] for e in ("low", "high"))
    assert low <= speedup <= high
    mbu = ctx.got("metric", "mbu")
    assert mbu["fused-persistent-132"] == pytest.approx(500e6 / 0.2e-3 / 4000e9, abs=1e-3)
    assert mbu["fused"] < mbu["fused-pdl-prefetch"] < mbu["fused-persistent-132"]
    assert ("note", "occupancy.gpt2-124M.float32.1", "122 registers") in ctx.calls


def test_logits_beyond_the_fp32_tolerance_of_the_five_kernel_step_fail_a_fatal_check() -> None:
    ctx = Recorder()
    FP.record(ctx, _value([0.0, 1e-5, 2e-3, 0.0]), bandwidth=4000.0)  # 2e-3 > 1e-4 x 10
    five = [c for c in ctx.calls if c[0] == "check" and "five-kernel" in c[1]]
    assert five == [("check", five[0][1], False, True, "fused-persistent-132")]


def test_a_hung_child_fails_the_experiment_with_the_watchdogs_words(monkeypatch: pytest.MonkeyPatch) -> None:
    from lab.run.childproc import ChildResult

    hung = ChildResult(FP.CHILD, None, "SIGKILL", True, 5.0, None, "", "")
    monkeypatch.setattr(FP, "run_child", lambda target, kwargs, timeout_s: hung)
    monkeypatch.setattr(FP, "copy_bandwidth", lambda ctx: 4000.0)
    ctx = types.SimpleNamespace(device=torch.device("cpu"), options=FP.Options(timeout_s=5.0),
                                activity=lambda what: __import__("contextlib").nullcontext())
    ctx.device = types.SimpleNamespace(type="cuda")
    with pytest.raises(RuntimeError, match="watchdog") as err:
        FP.run(ctx)  # type: ignore[arg-type]
    assert "grid barrier" in str(err.value)


def test_the_run_page_table_has_a_row_per_variant_with_the_speedups_interval() -> None:
    from report.sections.persistent import persistent
    from synthetic_runs import metric, rec, results

    where = {"size": "gpt2-124M", "dtype": "float32", "batch": 1}
    ms = [metric("step_ms", 0.25, "ms", variant="fused-pdl-prefetch", **where),
          metric("step_ms", 0.2, "ms", variant="fused-persistent-132", **where),
          metric("mbu", 0.5, "fraction", variant="fused-persistent-132", **where),
          metric("speedup_vs_fused", 1.25, "x", variant="fused-persistent-132", **where),
          metric("speedup_vs_fused_ci_low", 1.2, "x", variant="fused-persistent-132", **where),
          metric("speedup_vs_fused_ci_high", 1.3, "x", variant="fused-persistent-132", **where)]
    sec = persistent(results(rec("fused_persistent", ms)))
    assert sec is not None and not sec.empty
    rows = [[c.text for c in r] for r in sec.tables[0].rows]
    assert rows[0][3:] == ["fused-pdl-prefetch", "0.25 ms", "—", "—"], rows
    assert rows[1][3] == "fused-persistent-132" and rows[1][6] == "1.25× [1.2, 1.3]", rows
    assert persistent(results(rec("fusion", []))) is None


@pytest.mark.skipif(TRITON_MISSING is not None, reason=f"Triton does not import: {TRITON_MISSING}")
@pytest.mark.slow
def test_the_layer_kernel_compiles_for_hopper_with_its_barrier_in_one_thread() -> None:
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("TRITON_INTERPRET=1 in this process: the kernels are the interpreter's, not compilable")
    from lab.step.fused.aot import compile_plan, plan_for_shapes

    for dtype in (torch.float32, torch.bfloat16):
        plan = plan_for_shapes("gpt2", dtype, 1, persistent=True)
        assert len(plan.launches) == 12 + 2
        layers = [c for c in compile_plan(plan) if c.name == "layer"]
        assert len(layers) == 2  # layer 0 embeds
        for c in layers:
            assert c.registers is not None and c.registers <= 255 and c.spill_bytes == 0, c
            assert c.tensor_core_ops == 0 and c.grid_dependency_ops == 0, c
            # four arrivals, leaving (acq_rel), the reset (two exchanges); an acquire load for every wait
            assert c.atomics == 7 and c.acquires >= 4 and c.unpredicated_atomics == 0, c


@pytest.mark.cuda
@pytest.mark.skipif(TRITON_MISSING is not None, reason=f"Triton does not import: {TRITON_MISSING}")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_persistent_step_in_a_child_is_the_five_kernel_step(dtype: str) -> None:
    from lab.run.childproc import run_child

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    res = run_child("lab.experiments.fused_persistent:child_checks", {"device": "cuda", "size": "gpt2-124M",
                    "dtype": dtype, "batch": 1, "steps": 8, "programs_per_sm": [1, 2]}, timeout_s=240)
    assert res.value is not None, res.describe()
    got = res.value
    assert got["max_programs"] >= got["sms"] and got["checks"], got
    for grid, check in got["checks"].items():
        if dtype == "float32":
            assert check["tokens_equal"] and check["replay_identical"], (grid, check)
            assert all(s["tokens_equal"] and s["logit_diff"] <= FP.FP32_REL * s["logit_scale"] for s in check["five"])
            assert check["launches"] == 14, check
        else:
            assert all(check["bookkeeping_ok"]), check
            assert max(check["fused_err"]) <= FP.BF16_VS_EAGER * max(check["eager_err"]), check
