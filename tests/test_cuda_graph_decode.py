"""lab/experiments/cuda_graph_decode.py: its flow on the CPU, a broken graph as a failed check, the break-even of a
method that reuses a compilation.

The experiment needs CUDA to run for real; here it is driven through its Context on the smoke profile
with methods that run on the CPU (eager, compile-default with Dynamo's eager backend) and one that
cannot (graph: GraphedStep needs CUDA), which must be recorded as a skipped part, not lost.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from lab.contract.names import Method
from lab.contract.reasons import Code
from lab.step.methods import METHODS
from lab.host.toolchain import probe

from step_helpers import breaking_step


def _context(eid: str, profile, models: bool = True):
    """(a Context for experiment `eid` under `profile`, its fresh OK record), as the runner makes them: a ModelCache of
    random weights, or none where the test only plans."""
    from lab.contract import catalogue
    from lab.contract.results import Record, Results, RunInfo
    from lab.run.context import Context, ModelCache

    spec = catalogue.BY_ID[eid]
    rec = Record(id=spec.id, title=spec.title, status="OK")
    results = Results(run=RunInfo(profile=profile.name, started_at=""), manifest={}, experiments=[rec])
    cache = ModelCache(profile, {"source": "random"}) if models else None
    return Context(spec, profile, probe(), rec, results, cache), rec


def test_cuda_graph_decode_flow_on_the_cpu(monkeypatch) -> None:
    from lab.contract import profiles
    from lab.experiments import cuda_graph_decode
    from lab.run.runner import _finish_status

    # compile-default through Dynamo with its eager backend: a compiled method without a C++ compiler
    monkeypatch.setitem(METHODS, "compile-default", dataclasses.replace(METHODS["compile-default"], backend="eager"))
    profile = profiles.get("smoke").with_options(
        "cuda_graph_decode", methods=["eager", "compile-default", "graph", "fused-pdl"],
        sweep_methods=["eager"], bf16_methods=["eager", "compile-default"], bf16_batches=[1], rounds=2,
        sweep_rounds=2, steps=4, readback=[False, True], readback_batches=[1], batches=[1, 2])
    ctx, rec = _context("cuda_graph_decode", profile)
    cuda_graph_decode.run(ctx)
    _finish_status(rec)
    assert rec.status == "OK", (rec.reason, [c for c in rec.checks if not c.passed])
    from lab.contract.results import quarantine

    assert quarantine(rec) == []  # everything recorded can be stored (the runner would FAIL it otherwise)
    skipped = {s.item: s.code for s in rec.skipped}
    assert skipped["graph (batch=1 dtype=float32)"] == Code.NO_CUDA  # needs CUDA: skipped before building, saying so
    assert "CUDA" in next(s.message for s in rec.skipped if s.item.startswith("graph ("))
    assert skipped["fused-pdl"] == Code.NOT_ON_THIS_DEVICE
    assert skipped["compile-default at batch 2"] == Code.PROFILE_BUDGET  # the sweep keeps eager only
    assert skipped[Method.MAX_AUTOTUNE] == Code.PROFILE_BUDGET and skipped[Method.COMPILE_GRAPH_COORDESC] == \
        Code.PROFILE_BUDGET and skipped[Method.FUSED] == Code.DISABLED_IN_PROFILE
    got = {(m.name, m.params.get("method"), m.params.get("batch"), m.params.get("dtype"), m.params.get("readback"))
           for m in rec.metrics}
    assert ("step_ms", "compile-default", 1, "float32", False) in got
    assert ("step_ms", "eager", 1, "float32", True) in got and ("step_ms", "eager", 2, "float32", True) not in got
    assert ("step_ms", "compile-default", 2, "float32", False) not in got
    tf = {(m.params["method"], m.params["dtype"]): m.value for m in rec.metrics if m.name == "teacher_forced_agreement"}
    assert tf[("compile-default", "float32")] == 1.0 and ("eager", "float32") not in tf  # eager is the reference
    assert set(tf) == {("compile-default", "float32"), ("eager", "bfloat16"), ("compile-default", "bfloat16")}
    err = rec.metric("teacher_forced_max_logit_error", method="eager", batch=1, dtype="bfloat16").value
    assert err > 0.0  # bf16 against fp32
    assert not any(m.name in ("gpu_busy_us", "gap_us") for m in rec.metrics)  # the profiler has no device here
    phases = rec.notes["phase_s"]
    assert set(phases) == {"b1.float32", "b2.float32", "b1.bfloat16", "total_s"}
    assert set(phases["b1.float32"]) == {"build_s", "correctness_s", "kernels_s", "timing_s"}
    correct = {(m.params["method"], m.params["batch"], m.params["dtype"]): m.value for m in rec.metrics
               if m.name == "correct"}
    assert correct[("compile-default", 1, "float32")] is True and correct[("eager", 1, "bfloat16")] is True
    assert all(correct.values()), correct  # no method of this run is wrong: no failed check either
    assert "near-ties" in rec.notes["token_agreement"]


def test_cuda_graph_decode_records_a_broken_graph_as_a_failed_check(monkeypatch) -> None:
    """The experiment goes on with the other methods and ends FAILED with Dynamo's reason."""
    from lab.contract import profiles
    from lab.experiments import cuda_graph_decode
    from lab.run.runner import _finish_status

    broken = dataclasses.replace(METHODS["compile-default"], step=breaking_step, backend="eager")
    monkeypatch.setitem(METHODS, "compile-default", broken)
    profile = profiles.get("smoke").with_options(
        "cuda_graph_decode", methods=["eager", "compile-default"], bf16_batches=[], rounds=2, steps=4,
        readback=[False], batches=[1])
    ctx, rec = _context("cuda_graph_decode", profile)
    cuda_graph_decode.run(ctx)
    failed = [c for c in rec.checks if not c.passed]
    assert [c.name for c in failed] == ["compile-default compiles the step as one graph (batch=1 dtype=float32)"]
    assert failed[0].fatal and "torch._dynamo.graph_break()" in failed[0].detail
    assert rec.metric("step_ms", method="eager", batch=1, dtype="float32", readback=False).value > 0
    _finish_status(rec)
    assert rec.status == "FAILED" and "one graph" in rec.reason.message


def test_a_method_that_reuses_a_compilation_pays_for_it_in_its_break_even(monkeypatch) -> None:
    """compile+graph reuses compile-default's compiled code (its setup_s is the capture alone); its break-even must
    include that compile, or the page says it pays after 7 steps when it needs thousands (the H200 reference)."""
    from lab.contract import profiles
    from lab.measure.breakeven import break_even_calls
    from lab.experiments import cuda_graph_decode

    plain = dataclasses.replace(METHODS["compile-default"], backend="eager")
    monkeypatch.setitem(METHODS, "compile-default", plain)
    monkeypatch.setitem(METHODS, "reduce-overhead", dataclasses.replace(plain, name="reduce-overhead"))  # same key
    profile = profiles.get("smoke").with_options(
        "cuda_graph_decode", methods=["eager", "compile-default", "reduce-overhead"], bf16_batches=[], rounds=2,
        steps=4, readback=[False], batches=[3], dynamic=False)
    ctx, rec = _context("cuda_graph_decode", profile)
    cuda_graph_decode.run(ctx)
    p = {"batch": 3, "dtype": "float32"}
    value = lambda name, **q: rec.metric(name, **p, **q).value  # noqa: E731
    assert value("compiled_frames", method="reduce-overhead") == 0  # it reused compile-default's code
    own, first = value("setup_s", method="reduce-overhead"), value("setup_s", method="compile-default")
    eager, ms = (value("step_ms", method=m, readback=False) for m in ("eager", "reduce-overhead"))
    assert value("break_even_steps", method="reduce-overhead") == break_even_calls(own + first, eager, ms)
    assert rec.notes["break_even_includes.b3.float32"] == {
        "reduce-overhead": "compile-default's compile (its setup_s reused that compilation)"}


def test_a_method_sets_setup_is_the_stored_one_with_the_compile_it_reused() -> None:
    """What break_even_steps pays back (methods.time records it beside the saving per step, from the MethodSet)."""
    from lab.experiments.common.methods import MethodSet, Shape

    ms = MethodSet(Shape(1, "bfloat16", 8, 4, 64, {"batch": 1, "dtype": "bfloat16"}), weights=None)
    ms.built = {Method.EAGER: SimpleNamespace(compiled_by=None, setup_s=0.0),
                Method.COMPILE_DEFAULT: SimpleNamespace(compiled_by=None, setup_s=20.00004),
                Method.REDUCE_OVERHEAD: SimpleNamespace(compiled_by=Method.COMPILE_DEFAULT, setup_s=0.35),
                Method.GRAPH: SimpleNamespace(compiled_by="not-built", setup_s=-0.1)}
    assert ms.setup_s(Method.COMPILE_DEFAULT) == 20.0  # as stored: 4 decimals
    assert ms.setup_s(Method.REDUCE_OVERHEAD) == pytest.approx(20.35) and ms.setup_s(Method.GRAPH) == 0.0


def test_compile_tuning_runs_the_same_measurement_on_the_tuned_compiles_alone(monkeypatch) -> None:
    """compile_tuning (gpu-full's tuned compiles at every batch) on the CPU: max-autotune with Dynamo's eager backend
    is timed at every batch beside eager; the graphed methods need CUDA and are skipped saying so; it lists as skipped
    only what is its own to run (no fused variant, no reduce-overhead), and its skips name its own options."""
    from lab.contract import profiles
    from lab.experiments import compile_tuning
    from lab.run.runner import _finish_status

    monkeypatch.setitem(METHODS, Method.MAX_AUTOTUNE, dataclasses.replace(METHODS[Method.MAX_AUTOTUNE], backend="eager",
                                                                          mode=None))
    profile = profiles.get("smoke").with_options("compile_tuning", methods=["eager"], rounds=2, steps=4,
                                                 batches=[1, 2], bf16_methods=["eager", "max-autotune-no-cudagraphs"])
    ctx, rec = _context("compile_tuning", profile)
    compile_tuning.run(ctx)
    _finish_status(rec)
    assert rec.status == "OK", (rec.reason, [c for c in rec.checks if not c.passed])
    steps = {(m.params["method"], m.params["batch"], m.params["dtype"]) for m in rec.metrics
             if m.name == "step_ms" and not m.params.get("readback")}
    assert steps == {(m, b, d) for m in ("eager", "max-autotune-no-cudagraphs") for b, d in
                     ((1, "float32"), (2, "float32"), (1, "bfloat16"))}  # every batch: no sweep list narrows it
    assert not any(m.params.get("readback") for m in rec.metrics)  # cuda_graph_decode measures the read-back
    skipped = {s.item: (s.code, s.message) for s in rec.skipped}
    assert skipped[Method.COMPILE_GRAPH][0] == Code.DISABLED_IN_PROFILE
    assert skipped[Method.COMPILE_GRAPH_COORDESC][0] == Code.PROFILE_BUDGET  # minutes of compiling: left out here
    assert all("compile_tuning.methods" in skipped[m][1] for m in (Method.COMPILE_GRAPH, Method.COMPILE_GRAPH_COORDESC))
    assert skipped["max-autotune+graph (batch=1 dtype=float32)"][0] == Code.NO_CUDA
    mine = {Method.EAGER, Method.COMPILE_GRAPH, Method.COMPILE_GRAPH_COORDESC, Method.MAX_AUTOTUNE,
            Method.MAX_AUTOTUNE_GRAPH}
    assert {s.item.split(" ")[0] for s in rec.skipped} <= mine  # nothing of cuda_graph_decode's listed here
    assert rec.notes["config"]["batches"] == [1, 2] and set(rec.notes["phase_s"]) == {"b1.float32", "b2.float32",
                                                                                     "b1.bfloat16", "total_s"}


def test_cuda_graph_decode_names_compile_tuning_where_the_profile_runs_the_tuned_compiles_there() -> None:
    """In gpu-full the tuned compiles are compile_tuning's: cuda_graph_decode lists each as measured there, at every
    batch, never as a budget it cannot meet; in the gpu profile it points at gpu-full."""
    from lab.contract import profiles
    from lab.experiments import cuda_graph_decode

    def skips(name: str) -> dict[str, tuple[str, str]]:
        ctx, rec = _context("cuda_graph_decode", profiles.get(name), models=False)
        cuda_graph_decode._plan(ctx, ctx.options.batches)
        return {s.item: (s.code, s.message) for s in rec.skipped}

    full, gpu = skips("gpu-full"), skips("gpu")
    for name in cuda_graph_decode.TUNED_METHODS:
        assert full[name][0] == Code.PROFILE_BUDGET and "measures it in compile_tuning, at every batch" in full[name][1]
        assert "gpu-full profile measures it" in gpu[name][1]
    assert not any("gpu-full profile times every method" in m for _, m in full.values())  # never said of itself
