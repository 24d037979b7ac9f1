"""lab/experiments/ceilings.py: the bounds built on cuda_graph_decode's record, on the CPU (with the methods that need no CUDA)."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_decode_comparison_and_its_bounds_run_on_cpu(tmp_path) -> None:
    """cuda_graph_decode's measuring, checking and kernel counting, and ceilings' bounds built on its
    record, exercised on the CPU with the methods that need no CUDA (the runner skips it there)."""
    from lab.contract import profiles
    from lab.experiments import ceilings as ceilings_exp
    from lab.experiments import cuda_graph_decode
    from lab.host.toolchain import probe

    tc = probe()
    methods = ["eager"] + (["compile-default"] if tc.cxx_reason() is None else [])
    profile = profiles.get("smoke").with_options(
        "cuda_graph_decode", methods=methods, bf16_batches=[], rounds=2, steps=6, readback_methods=["eager"])
    ctx_for = one_run(profile, tc)

    ctx = ctx_for("cuda_graph_decode")
    cuda_graph_decode.run(ctx)
    rec = ctx.record
    assert all(c.passed for c in rec.checks if c.fatal), [c for c in rec.checks if not c.passed]
    for batch in profile.batches:
        for m in methods:
            step = rec.metric("step_ms", method=m, batch=batch, dtype="float32", readback=False)
            assert step.spread.n == 2 * 6 and len(rec.samples) >= 2
            assert rec.metric("tokens_equal", method=m, batch=batch, dtype="float32").value is True
            assert rec.metric("kernels_per_step", method=m, batch=batch, dtype="float32").value > 5
        assert rec.metric("step_ms", method="eager", batch=batch, dtype="float32", readback=True).value > 0
        assert rec.metric("speedup_vs_eager", method="eager", batch=batch, dtype="float32", readback=False).value == 1
    # every method of the table that was not asked for is listed with why (max-autotune: its compile time)
    skipped = {s.item: s.code for s in rec.skipped}
    from lab.step.methods import METHODS

    assert set(skipped) == {n for n in METHODS if n not in methods}
    assert skipped["max-autotune-no-cudagraphs"] == "profile_budget"

    bctx = ctx_for("ceilings")
    ceilings_exp.run(bctx)
    b = bctx.record
    assert b.notes["step_source"] == "cuda_graph_decode"
    for m in methods:
        row = dict(method=m, batch=1, dtype="float32")
        assert b.metric("binding", **row).value in ("launch", "bandwidth", "compute")
        bound = b.metric("bound_ms", **row).value
        assert bound == max(b.metric(f"bound_{k}_ms", **row).value for k in ("launch", "bandwidth", "compute"))
        measured = rec.metric("step_ms", method=m, batch=1, dtype="float32", readback=False).value
        # The ratio was computed from the unrounded bound, which is stored rounded to 1e-5 ms, and then
        # rounded to 1e-3: recomputing it from the stored bound may differ by the first rounding carried
        # through the division (measured * 0.5e-5 / bound**2) plus half a unit of the second.
        tolerance = measured * 0.5e-5 / bound ** 2 + 0.5e-3 + 1e-12  # (+ float noise)
        assert b.metric("measured_over_bound", **row).value == pytest.approx(measured / bound, rel=0, abs=tolerance)
    _one_mbu_per_step(rec, bctx, profile)


def _one_mbu_per_step(cgd, bctx, profile) -> None:
    """One MBU per (method, batch, dtype) in a run with both experiments (issue 28): the method's own, stored by
    cuda_graph_decode, = the bytes of the slots a step attends (ceilings' bytes_per_step) / its step / the copy
    bandwidth; ceilings stores none for cuda_graph_decode's steps."""
    from lab.step import ceilings

    ceil, w = bctx.record, bctx.gpt2("float32")[1]
    mbus = [(m.params["method"], m.params["batch"], m.params["dtype"]) for r in (cgd, ceil) for m in r.metrics
            if m.name == "mbu"]
    assert mbus and len(mbus) == len(set(mbus)) and not [m for m in ceil.metrics if m.name == "mbu"], mbus
    steps = cgd.notes["config"]["steps"]
    bandwidth = cgd.metric("bandwidth_GBps", kind="copy").value  # stored to 0.01 GB/s
    for method, batch, dtype in mbus:
        p = {"method": method, "batch": batch, "dtype": dtype}
        nbytes = ceil.metric("bytes_per_step", **p).value
        assert nbytes == ceilings.decode_bytes(w, batch, profile.prompt_len, steps) == ceilings.step_bytes(
            w, batch, profile.prompt_len + (steps - 1) / 2 + 1) < ceilings.step_bytes(w, batch, profile.max_len)
        timed = cgd.metric("step_ms", readback=False, **p)
        step = timed.value
        assert cgd.metric("mbu", **p).value == pytest.approx(nbytes / (step / 1e3) / 1e9 / bandwidth, rel=2e-3, abs=1e-4)
        # its interval: the step's, over the same bandwidth (the step's slower end is the MBU's lower one)
        assert timed.spread is not None and timed.spread.ci_low is not None and timed.spread.ci_high is not None
        low, high = cgd.metric("mbu_ci_low", **p).value, cgd.metric("mbu_ci_high", **p).value
        assert low == pytest.approx(nbytes / (timed.spread.ci_high / 1e3) / 1e9 / bandwidth, rel=2e-3, abs=1e-4)
        assert high == pytest.approx(nbytes / (timed.spread.ci_low / 1e3) / 1e9 / bandwidth, rel=2e-3, abs=1e-4)
        assert low <= cgd.metric("mbu", **p).value <= high


def test_ceilings_bounds_the_cases_of_a_failed_decode_comparison_that_passed_their_checks() -> None:
    """A fatal check of one case (bf16 compile on the H200 reference) fails cuda_graph_decode, not its other cases:
    ceilings bounds those and lists the failed case as skipped, instead of falling back to eager and graph alone."""
    from lab.contract import metrics as M
    from lab.contract import profiles
    from lab.experiments import ceilings as ceilings_exp
    from lab.host.toolchain import probe

    tc, profile = probe(), profiles.get("smoke")
    ctx_for = one_run(profile, tc)

    cgd = ctx_for("cuda_graph_decode")
    for method, ms in (("eager", 3.0), ("compile-default", 2.0), ("fused", 0.5)):
        p = {"method": method, "batch": 1, "dtype": "float32"}
        cgd.timing(M.STEP_MS, [ms, ms * 1.01, ms * 0.99], readback=False, **p)
        cgd.metric(M.KERNELS_PER_STEP, 100, **p)
    cgd.check("fused compiles the step as one graph (batch 1, float32)", False, detail="stand-in", fatal=True,
              method="fused", batch=1, dtype="float32")
    cgd.record.status = "FAILED"
    b = ctx_for("ceilings")
    ceilings_exp.run(b)
    rec = b.record
    assert rec.notes["step_source"].startswith("cuda_graph_decode (FAILED")
    for method in ("eager", "compile-default"):
        assert rec.metric("bound_ms", method=method, batch=1, dtype="float32").value > 0
    assert not [m for m in rec.metrics if m.params.get("method") == "fused"]
    assert not [m for m in rec.metrics if m.name == "mbu"]  # a step cuda_graph_decode timed: its one MBU is there
    assert {s.item: s.code for s in rec.skipped}["bounds fused batch 1 float32"] == "check_failed"


def test_a_bound_above_the_step_it_bounds_is_flagged_not_a_bound() -> None:
    """A step measured below its bound (a noisy step or ceiling): ceilings says so with a failed non-fatal check on
    that case, the experiment stays OK, and the pages print "bound not meaningful" (report.sections.steps.bound_of)."""
    from lab.contract import metrics as M
    from lab.contract import profiles
    from lab.experiments import ceilings as ceilings_exp
    from lab.host.toolchain import probe
    from lab.run.runner import _finish_status
    from report.sections.steps import bound_of

    ctx_for = one_run(profiles.get("smoke"), probe())
    cgd = ctx_for("cuda_graph_decode")
    for method, ms in (("eager", 1e4), ("graph", 1e-4)):
        p = {"method": method, "batch": 1, "dtype": "float32"}
        cgd.timing(M.STEP_MS, [ms, ms * 1.01, ms * 0.99], readback=False, **p)
        cgd.metric(M.KERNELS_PER_STEP, 100, **p)
    b = ctx_for("ceilings")
    ceilings_exp.run(b)
    _finish_status(b.record)
    checks = {c.params["method"]: c for c in b.record.checks if "not below its bound" in c.name}
    assert b.record.status == "OK" and checks["eager"].passed and not checks["graph"].passed
    assert not checks["graph"].fatal and "not a bound here" in checks["graph"].detail
    assert b.record.metric("measured_over_bound", method="graph", batch=1, dtype="float32").value < 1
    results = [cgd.record, b.record]
    assert bound_of(results, "graph", 1, "float32").text.startswith("bound not meaningful: graph's step in ")
    assert not bound_of(results, "eager", 1, "float32").why_not


def one_run(profile, tc):
    """ctx_for(experiment id): a Context whose record joins one run's results, as the runner would make it (the
    later experiments of the run see the earlier ones' records)."""
    from lab.contract import catalogue
    from lab.contract.results import Record, Results, RunInfo
    from lab.run.context import Context, ModelCache

    results = Results(run=RunInfo(profile=profile.name, started_at=""), manifest={})
    models = ModelCache(profile, {"source": "random"})

    def ctx_for(exp_id: str) -> Context:
        spec = catalogue.BY_ID[exp_id]
        rec = Record(id=exp_id, title=spec.title, status="OK")
        results.experiments.append(rec)
        return Context(spec, profile, tc, rec, results, models)

    return ctx_for
