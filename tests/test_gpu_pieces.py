"""GPU pieces: the CPU-checkable parts here; the CUDA parts run on a CUDA host (skipped elsewhere)."""

from __future__ import annotations

import pytest
import torch

from lab.step import ceilings, decode
from lab.run.childproc import run_child
from lab.step.graphs import CacheFullError, GraphedStep


def test_bound_arithmetic(tiny) -> None:
    _, w = tiny
    b = ceilings.bounds(kernels=200, per_kernel_us=1.0, nbytes=4_000_000_000, bandwidth_gbps=4000, flops=10**12,
                        peak_tflops=50)
    assert b.launch_ms == pytest.approx(0.2) and b.bandwidth_ms == pytest.approx(1.0)
    assert b.compute_ms == pytest.approx(20.0) and b.binding == "compute" and b.bound_ms == pytest.approx(20.0)
    E, L, V = w.n_embd, w.n_layer, w.wte.shape[0]
    assert ceilings.step_flops(w, 2, 64) == 2 * 2 * (L * 12 * E * E + V * E + L * 2 * 64 * E)
    cache = 2 * L * 3 * 64 * E * 4
    assert ceilings.step_bytes(w, 3, 64) - ceilings.step_bytes(w, 1, 64) == cache - 2 * L * 1 * 64 * E * 4 + 2 * E * 4
    with pytest.raises(ValueError):
        ceilings.bounds(1, 1.0, 1, 0.0, 1, 1.0)


def test_graphed_step_refuses_cpu_state(tiny) -> None:
    _, w = tiny
    with pytest.raises(ValueError, match="CUDA"):
        GraphedStep(decode.decode_step, decode.new_state(w, 1, 16), w)


def test_child_death_is_recorded() -> None:
    ok = run_child("json:loads", {"s": "[1, 2]"})
    assert ok.ok and ok.value == [1, 2]
    died = run_child("os:abort", {})
    assert not died.ok and died.signal == "SIGABRT" and "SIGABRT" in died.describe()
    raised = run_child("lab.contract.profiles:get", {"name": "nope"})
    assert raised.exit_code == 1 and "unknown profile" in raised.describe()
    slow = run_child("subprocess:run", {"args": ["sleep", "30"]}, timeout_s=2)
    assert slow.timed_out and slow.describe().startswith("timed out")


@pytest.mark.cuda
def test_graphed_step_restores_state_and_replays_eager_tokens(tiny) -> None:
    model, _ = tiny
    from lab.step.model import extract_weights

    w = extract_weights(model, device="cuda")
    prompt = torch.randint(0, 512, (2, 8), generator=torch.Generator().manual_seed(0)).cuda()
    state = decode.new_state(w, 2, 32)
    decode.prefill(state, w, prompt)
    before = state.snapshot()
    g = GraphedStep(decode.decode_step, state, w)
    assert all(torch.equal(t, before[k]) for k, t in state.buffers().items())
    for _ in range(10):
        g.replay()
    ref = decode.generate_fixed(w, prompt, 11, max_len=32)
    assert torch.equal(state.out[:, 8:19].cpu(), ref)
    for _ in range(32):
        try:
            g.replay()
        except CacheFullError:
            break
    else:
        pytest.fail("the host guard never fired")
    assert g.position == 31  # the step at 31 would write output slot 32 of a 32-slot cache


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
    assert {s.item: s.code for s in rec.skipped}["bounds fused batch 1 float32"] == "check_failed"


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
