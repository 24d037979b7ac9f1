"""Where a fused-step kernel's time goes (lab.step.fused.stages, lab.step.fused.anatomy, lab.experiments.fused_anatomy):
the parts drawn from fake timings, the copies that keep the streamed bytes out of L2, the experiment NOT_RUN without
CUDA and never in a default run, and every variant's switches compiled for sm_90 (the interpreter runs them against
the step's own launches: tests/test_fused_interpreter.py, case `anatomy`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from lab.contract import catalogue, profiles
from lab.experiments.fused_anatomy import copies_for, l2_bytes
from lab.step.fused import stages as ST, triton_import_error

TRITON_MISSING = triton_import_error()


def test_parts_are_differences_of_variants_with_paired_intervals() -> None:
    rounds = {"full": [[4.0, 4.2], [4.1, 4.3], [4.0, 4.1]], "idle": [[2.0, 2.0], [2.1, 2.1], [2.0, 2.2]],
              "idle_one": [[1.0, 1.0], [1.1, 1.0], [1.0, 1.0]], "no_weights": [[3.0, 3.1], [3.1, 3.2], [3.0, 3.0]],
              "pdl": [[3.5, 3.5], [3.6, 3.6], [3.5, 3.4]]}
    got = {p.part: p for p in ST.parts("proj", rounds, weight_us=0.5)}
    assert set(got) == {"ramp", "weights", "pdl_overlap", "stream_excess"}  # what the variants timed allow
    assert got["ramp"].us == pytest.approx(2.05 - 1.0) and got["weights"].us == pytest.approx(4.1 - 3.05)
    assert got["pdl_overlap"].us == pytest.approx(4.1 - 3.5)
    assert got["stream_excess"].us == pytest.approx(got["weights"].us - 0.5)
    for p in got.values():
        assert p.ci is not None and p.ci.low <= p.us <= p.ci.high, p
    assert got["stream_excess"].ci.low == pytest.approx(got["weights"].ci.low - 0.5)
    assert not [p for p in ST.parts("proj", {k: v[:1] for k, v in rounds.items()}) if p.ci is not None]  # one round


def test_every_part_names_timed_variants_and_attention_has_no_weights() -> None:
    assert {v for pair in ST.PARTS.values() for v in pair} <= set(ST.BY_NAME)
    assert not ST.applies("attention", ST.BY_NAME["no_weights"]) and ST.applies("attention", ST.BY_NAME["pdl"])
    assert ST.BY_NAME["arithmetic"].leave_out == ST.Stage.WEIGHTS | ST.Stage.INPUT | ST.Stage.STORE


def test_step_variants_throw_one_switch_in_every_launch_with_the_steps_own_pdl() -> None:
    from lab.step.fused import anatomy as A
    from lab.step.fused.aot import plan_for_shapes
    from lab.step.fused.kernels import idle_kernel

    plan = plan_for_shapes("tiny", torch.float32, 1, max_len=32, pdl=True, prefetch=True)
    plan.pdl = True  # as prepare(pdl=True) on a Hopper device sets it
    by = {v.name: (v, A.step_variant(plan, v)) for v in ST.STEP_VARIANTS}
    assert set(by) == {"full", "no_weights", "arithmetic", "idle", "no_wait"} | {f"no_wait:{k}" for k in ST.STEP_WAITS}
    assert all(a is b for a, b in zip(by["full"][1], plan.launches, strict=True))  # the step as it runs
    kept = 0
    for name in ("no_weights", "arithmetic", "no_wait"):
        variant, launches = by[name]
        for got, launch in zip(launches, plan.launches, strict=True):
            if "LEAVE_OUT" not in launch.kernel.arg_names:  # argmax: no switch, as it runs
                assert got is launch
                kept += 1
                continue
            assert got.kernel is launch.kernel and got.grid == launch.grid and got.args is launch.args
            assert got.meta["LEAVE_OUT"] == int(variant.leave_out) and got.meta["USE_PDL"] and got.meta["launch_pdl"]
    assert kept == 3
    for kernel in ST.STEP_WAITS:  # one kernel's waits left out, every other launch as the step runs it
        variant, launches = by[f"no_wait:{kernel}"]
        changed = [got for got, launch in zip(launches, plan.launches, strict=True) if got is not launch]
        assert changed and all(got.name == f"{kernel}:{variant.name}" for got in changed), kernel
        assert len(changed) == sum(launch.name == kernel for launch in plan.launches), kernel
        assert all(got.meta["LEAVE_OUT"] == int(ST.Stage.WAIT) and got.meta["USE_PDL"] for got in changed), kernel
    for got, launch in zip(by["idle"][1], plan.launches, strict=True):  # the chain of launches alone, PDL's calls kept
        assert got.kernel is idle_kernel and got.grid == launch.grid and got.meta["USE_PDL"] and got.meta["launch_pdl"]
        assert got.meta["num_warps"] == launch.meta.get("num_warps", 4)
    plan.pdl = False
    assert not any(g.meta["USE_PDL"] for g in A.step_variant(plan, by["idle"][0]))
    with pytest.raises(ValueError, match="no_wait"):  # a step without PDL has no wait to leave out
        A.step_variant(plan, by["no_wait"][0])


def test_copies_make_the_asked_multiple_of_l2() -> None:
    assert copies_for(2_000_000, 50_000_000, 4.0) == 100
    assert copies_for(200_000_000, 50_000_000, 4.0) == 1 and copies_for(10, 50, 0.0) == 1


def test_no_l2_size_is_not_run_with_its_reason_and_a_size_is_read_not_guessed(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from lab.run.runner import NotRun

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: types.SimpleNamespace(L2_cache_size=0))
    with pytest.raises(NotRun) as err:
        l2_bytes("cuda:0")
    assert err.value.reason.code == "not_on_this_device" and "L2_cache_size" in err.value.reason.message
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: types.SimpleNamespace(L2_cache_size=60 << 20))
    assert l2_bytes("cuda:0") == 60 << 20


def test_by_name_only_and_not_run_without_cuda(tmp_path: Path) -> None:
    from lab.run import runner

    assert "fused_anatomy" not in {s.id for s in catalogue.resolve(None, sweeps=True)}
    assert [s.id for s in catalogue.resolve(["fused_anatomy"])] == ["fused_anatomy"]
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    rec = runner.run(profiles.get("gpu"), tmp_path, only=["fused_anatomy"]).record("fused_anatomy")
    assert rec.status == "NOT_RUN" and rec.reason.code == "no_cuda" and "NVIDIA" in rec.reason.message, rec


@pytest.mark.skipif(TRITON_MISSING is not None, reason=f"Triton does not import: {TRITON_MISSING}")
@pytest.mark.slow
def test_every_variant_compiles_for_hopper_and_leaves_its_stage_out() -> None:
    from dataclasses import asdict

    from lab.step.fused.aot import anatomy_plan, compile_plan, plan_for_shapes, ptxas_path

    if ptxas_path() is None:
        pytest.skip("the installed Triton has no bundled ptxas")
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("TRITON_INTERPRET=1 in this process: the kernels are the interpreter's, not compilable")
    got = {k["name"]: k for k in map(asdict, compile_plan(anatomy_plan(plan_for_shapes("gpt2", torch.bfloat16, 1))))}
    assert set(got) == {f"{k}:{v.name}" for k in ST.KERNELS for v in ST.VARIANTS if ST.applies(k, v)}
    for name, k in got.items():
        variant = ST.BY_NAME[name.split(":")[1]]
        assert k["registers"] is not None and k["spill_bytes"] == 0 and k["tensor_core_ops"] == 0, k
        assert k["grid_dependency_ops"] == (1 if ST.Stage.WAIT in variant.leave_out else 2 if variant.pdl else 0), k
    for kernel in ST.KERNELS:  # the weights and input left out: their loads compiled out, nothing else
        full, arithmetic = got[f"{kernel}:full"]["vector_loads"], got[f"{kernel}:arithmetic"]["vector_loads"]
        assert got[f"{kernel}:no_store"]["vector_loads"] == full > got[f"{kernel}:no_input"]["vector_loads"], kernel
        assert arithmetic < full and got[f"{kernel}:idle"]["registers"] < got[f"{kernel}:full"]["registers"], kernel
        if kernel != "attention":
            assert arithmetic <= got[f"{kernel}:no_weights"]["vector_loads"] < full, kernel


def test_the_run_page_table_has_a_row_per_kernel_with_variants_then_stages() -> None:
    from report.sections.anatomy import anatomy
    from synthetic_runs import metric, rec, results

    where = {"size": "gpt2-124M", "dtype": "bfloat16", "batch": 1}
    ms = [metric("anatomy_us", us, "us", kernel=k, variant=v, **where)
          for k in ("proj", "lm_head") for v, us in (("full", 4.0), ("idle", 2.0))]
    ms += [metric("stage_us", 2.0, "us", kernel="proj", part="ramp", **where),
           metric("stage_us_ci_low", 1.5, "us", kernel="proj", part="ramp", **where),
           metric("stage_us_ci_high", 2.5, "us", kernel="proj", part="ramp", **where)]
    sec = anatomy(results(rec("fused_anatomy", ms)))
    assert sec is not None and not sec.empty
    table = sec.tables[0]
    assert table.columns == ["dtype", "kernel", "full", "idle", "ramp"]
    assert [[c.text for c in r] for r in table.rows] == [["bfloat16", "proj", "4 us", "2 us", "2 us [1.5, 2.5]"],
                                                         ["bfloat16", "lm_head", "4 us", "2 us", "—"]]
    assert anatomy(results(rec("fusion", []))) is None  # a run without it: no section
    assert len(sec.tables) == 1  # no whole step recorded: no second table
    ms += [metric("anatomy_step_us", us, "us", variant=v, method="fused-pdl-prefetch", **where)
           for v, us in (("full", 168.7), ("idle", 60.25))]
    whole = anatomy(results(rec("fused_anatomy", ms)))
    assert whole is not None and len(whole.tables) == 2
    step = whole.tables[1]
    assert step.columns == ["dtype", "method", "full", "idle"]
    assert [[c.text for c in r] for r in step.rows] == [["bfloat16", "fused-pdl-prefetch", "169 us", "60.2 us"]]
