"""lab.step.fused.breakdown: the fused step kernel by kernel from a profile, on made-up profiles (no CUDA), and the
profile phase (lab.experiments.common.methods) storing it as the declared `fused_kernels` note."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lab.contract import notes as N
from lab.step.fused import breakdown as K, traffic as T

GPT2 = T.Shape(n_layer=12, n_embd=768, n_head=12, vocab=50257, batch=1, elem=4, max_len=256)
GEMV = T.Layout("gemv", 4, 786)
FIXED_US, GBPS = 3.0, 4000.0  # the made-up profiles' kernels: 3 µs + bytes at 4 TB/s
PARAMS = {"batch": 1, "dtype": "float32"}


def _us(c: T.Call) -> float:
    return FIXED_US + c.total / (GBPS * 1e3)


def _profile(step: list[T.Call], gemm_kernels: dict[str, list[str]] | None = None) -> list[tuple[str, float]]:
    """What the profiler would list for `step`: one kernel per Triton launch, a library call's cuBLAS kernels."""
    out: list[tuple[str, float]] = []
    for c in step:
        if c.function is not None:
            out.append((c.function, _us(c)))
        else:
            names = (gemm_kernels or {}).get(c.kernel, ["sm90_xmma_gemm_f32f32_tn"])
            out += [(n, _us(c) / len(names)) for n in names]
    return out


def test_each_launch_gets_its_profiled_kernel_and_the_fit_finds_latency_and_bandwidth() -> None:
    step = T.calls(GPT2, GEMV, 64)
    note = K.table("fused", PARAMS, GPT2, GEMV, 64, _profile(step), 327.0, 300.0, pdl=False)
    rows = {r["kernel"]: r for r in note["kernels"]}
    assert list(rows) == ["ln_qkv", "attention", "proj", "ln_fc", "fc2", "lm_head", "argmax"]
    fc = rows["ln_fc"]
    per_call = next(c for c in step if c.kernel == "ln_fc")
    assert (fc["calls"], fc["bytes_per_call"], fc["weight_bytes_per_call"]) == (12, per_call.total, per_call.weights)
    assert fc["us_per_call"] == pytest.approx(_us(per_call), abs=1e-3)
    assert fc["gbps"] == pytest.approx(per_call.total / _us(per_call) / 1e3, rel=1e-3)
    assert fc["share"] == pytest.approx(12 * _us(per_call) / 327.0, abs=1e-4)
    assert rows["attention"]["kv_bytes_per_call"] == 65 * 2 * 768 * 4  # position 64: 65 slots
    assert note["kernel_us"] == pytest.approx(sum(_us(c) for c in step), abs=1e-2) and note["additive"]
    assert note["fit"]["fixed_us"] == pytest.approx(FIXED_US, abs=1e-3)
    assert note["fit"]["bandwidth_gbps"] == pytest.approx(GBPS, rel=1e-3)
    assert note["fit"]["points"] == 60 and note["fit"]["kernels"] == list(T.LAYER_KERNELS["gemv"])
    assert 0.5 < note["fit"]["fixed_share"] < 1 and note["why"] == ""
    assert (note["kv_slots"], note["step_us"], note["bytes"]) == (65, 327.0, sum(c.total for c in step))
    assert N.check("cuda_graph_decode", N.FUSED_KERNELS.key_for(method="fused", shape="b1.float32"), note) is None


def test_a_fixed_latency_fit_says_why_half_the_bytes_is_not_half_the_time() -> None:
    """Kernels of 3 µs + bytes at 4 TB/s in both dtypes: each fit finds that model, and the bf16 step, with about
    half the bytes, takes far more than half the fp32 step's time, the fixed part a larger share of it."""
    bf16 = T.Shape(**{**GPT2.__dict__, "elem": 2})
    fits = {}
    for shape in (GPT2, bf16):
        step = T.calls(shape, GEMV, 64)
        note = K.table("fused", PARAMS, shape, GEMV, 64, _profile(step), None, None, pdl=False)
        assert note["fit"]["fixed_us"] == pytest.approx(FIXED_US, abs=1e-3)
        assert note["fit"]["bandwidth_gbps"] == pytest.approx(GBPS, rel=1e-3)
        assert all(r["share"] is None for r in note["kernels"])  # no timed step: no share
        fits[shape.elem] = note
    assert fits[2]["bytes"] < 0.51 * fits[4]["bytes"] and fits[2]["kernel_us"] > 0.75 * fits[4]["kernel_us"]
    assert fits[2]["fit"]["fixed_share"] > fits[4]["fit"]["fixed_share"] > 0.5


def test_the_gemm_paths_library_calls_take_their_kernels() -> None:
    layout = T.Layout("gemm", 4, 99)
    shape = T.Shape(**{**GPT2.__dict__, "batch": 16})
    step = T.calls(shape, layout, 64)
    seq = _profile(step, {"fc_gemm": ["sm90_gemm_splitk", "splitKreduce_kernel"]})  # one GEMM as two kernels
    us = K.attribute(seq, step)
    assert isinstance(us, list) and us == pytest.approx([_us(c) for c in step])
    note = K.table("fused", {"batch": 16, "dtype": "float32"}, shape, layout, 64, seq, 900.0, None, pdl=False)
    rows = {r["kernel"]: r for r in note["kernels"]}
    assert rows["add_ln"]["calls"] == 25 and rows["qkv_gemm"]["function"] is None
    assert note["fit"]["kernels"] == list(T.LAYER_KERNELS["gemm"]) and note["kv_slots"] == 64
    assert note["fit"]["fixed_us"] == pytest.approx(FIXED_US, abs=1e-3)


def test_a_plain_gemm_forms_bias_copy_and_gemm_are_the_calls_and_its_row_says_the_form() -> None:
    """Bias rows copied into the output, then the GEMM (lab.step.fused.layout's plain-GEMM form): two profiled kernels,
    one library call, with the form's bytes; the default forms' rows say theirs."""
    layout = T.Layout("gemm", 4, 99, forms=(("proj_gemm", "blas-t"),))
    shape = T.Shape(**{**GPT2.__dict__, "batch": 16})
    step = T.calls(shape, layout, 64)
    seq = _profile(step, {"proj_gemm": ["vectorized_elementwise_kernel", "sm80_xmma_gemm_f32f32_tn"]})
    us = K.attribute(seq, step)
    assert isinstance(us, list) and us == pytest.approx([_us(c) for c in step])
    note = K.table("fused", {"batch": 16, "dtype": "float32"}, shape, layout, 64, seq, 900.0, None, pdl=False)
    rows = {r["kernel"]: r for r in note["kernels"]}
    assert (rows["proj_gemm"]["form"], rows["qkv_gemm"]["form"], rows["lm_head_gemm"]["form"]) == \
        ("blas-t", "lt-t", "blas-t")
    assert rows["add_ln"]["form"] is None and note["why"] == ""
    proj = next(c for c in step if c.kernel == "proj_gemm")
    assert rows["proj_gemm"]["activation_bytes_per_call"] == proj.act_in + proj.act_out == 4 * 16 * 768 * 4


@pytest.mark.parametrize("change, why", [
    (lambda seq: seq[:-1], "is not among them"),
    (lambda seq: seq + [("memcpy_kernel", 1.0)], "1 kernel(s) after the step's 62 launches"),
    (lambda seq: [("triton_poi_fused_0", 2.0)] + seq[1:], "profiled kernel 1 is 'triton_poi_fused_0'"),
])
def test_a_profile_that_is_not_the_plans_keeps_the_bytes_and_says_why(change, why) -> None:
    step = T.calls(GPT2, GEMV, 64)
    note = K.table("fused", PARAMS, GPT2, GEMV, 64, change(_profile(step)), 327.0, None, pdl=False)
    assert why in note["why"] and note["fit"] is None and not note["additive"] and note["kernel_us"] is None
    assert [r["us_per_call"] for r in note["kernels"]] == [None] * 7
    assert note["kernels"][3]["bytes_per_call"] == next(c for c in step if c.kernel == "ln_fc").total


def test_a_library_call_with_no_kernel_of_its_own_is_a_mismatch() -> None:
    step = T.calls(GPT2, T.Layout("gemm", 4, 99), 64)
    seq = [x for x in _profile(step) if not x[0].startswith("sm90")]
    assert K.attribute(seq, step) == "no profiled kernel for the step's library call 2 (qkv_gemm)"


def test_under_pdl_the_times_are_kept_not_added_and_not_fitted() -> None:
    step = T.calls(GPT2, GEMV, 64)
    note = K.table("fused-pdl", PARAMS, GPT2, GEMV, 64, _profile(step), 249.0, 240.0, pdl=True)
    assert note["why"] == K.PDL_CAVEAT and note["fit"] is None and not note["additive"] and note["pdl"]
    assert all(r["us_per_call"] is not None for r in note["kernels"])  # the durations stay, marked


def test_the_fit_needs_two_byte_counts_and_a_rising_time() -> None:
    assert K.fit([(1.0, 2.0)]) is None and K.fit([(5.0, 2.0), (5.0, 3.0)]) is None
    flat = K.fit([(1e6, 4.0), (2e6, 3.0)])
    assert flat is not None and flat.bandwidth_gbps is None and flat.us_per_byte < 0
    two = K.fit([(0.0, 3.0), (4e6, 4.0)])  # 1 µs per 4 MB: 4 TB/s, 3 µs fixed
    assert two is not None and two.fixed_us == pytest.approx(3.0) and two.bandwidth_gbps == pytest.approx(4000.0)
    assert two.fixed_share == pytest.approx(6.0 / 7.0)


def test_the_profile_phase_stores_the_fused_note(tiny, monkeypatch) -> None:
    """methods.profile on a fused method (bound on the CPU, profile faked): the note at the prompt's position,
    the plan's layout, the median step's share; no note for a method that is not the fused step."""
    pytest.importorskip("triton")
    from lab.contract import metrics as M, profiles
    from lab.contract.catalogue import BY_ID
    from lab.contract.results import Record
    from lab.experiments.common import methods
    from lab.measure import stepprofile
    from lab.run.context import Context
    from lab.step import decode as D
    from lab.step.fused.step import bind
    from lab.step.methods import StepMethod

    _, w = tiny
    state = D.new_state(w, 1, 24)
    fn = bind(state, w)
    prompt = torch.zeros(1, 8, dtype=torch.long)
    fused = StepMethod("fused", state, w, prompt, call=lambda: fn(state, w), path=str(fn.plan.path))
    eager = StepMethod("eager", D.new_state(w, 1, 24), w, prompt)
    shape = T.Shape.of(w, 1, 24)
    step = T.calls(shape, T.Layout.of_plan(fn.plan), 8)
    fake = {"kernels": len(step), "device_us": 100.0, "busy_us": 90.0, "span_us": 95.0, "top": [],
            "sequence": _profile(step)}
    monkeypatch.setattr(stepprofile, "count_kernels", lambda call, device: dict(fake))
    ctx = Context(BY_ID["cuda_graph_decode"], profiles.get("smoke"), None, Record("cuda_graph_decode", "", "OK"),
                  SimpleNamespace(experiments=[]), None)
    assert M.KERNELS_PER_STEP in ctx.spec.metrics
    ms = methods.MethodSet(methods.Shape(1, "float32", 8, 4, 24, dict(PARAMS)), w, {"eager": eager, "fused": fused})
    ms.ms[("fused", False)] = 0.2
    methods.profile(ctx, ms)
    note = ctx.record.notes["fused_kernels.fused.b1.float32"]
    assert (note["position"], note["path"], note["step_us"], note["busy_us"]) == (8, "gemv", 200.0, 90.0)
    assert [r["kernel"] for r in note["kernels"]][:2] == ["ln_qkv", "attention"] and note["fit"] is not None
    assert not any(k.startswith("fused_kernels.eager") for k in ctx.record.notes)


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 16])  # the gemv path and the gemm path (lab.step.fused.rule)
def test_a_profiled_fused_step_on_cuda_is_its_plans_launches(tiny, batch) -> None:
    """On the device: the profiler names the Triton kernels as traffic.FUNCTIONS does and lists them in launch
    order, so every launch gets a time and the plain variant gets a fit."""
    from lab.contract.names import Method
    from lab.measure.stepprofile import count_kernels
    from lab.step import methods as stepmethods
    from lab.step.model import extract_weights

    w = extract_weights(tiny[0], device="cuda")
    prompt = torch.zeros(batch, 8, dtype=torch.long, device="cuda")
    m = stepmethods.build(Method.FUSED, w, prompt, 40)
    m.start()
    k = count_kernels(m.call, torch.device("cuda"))
    plan = K.plan_of(m.state)
    layout = T.Layout.of_plan(plan)
    note = K.table("fused", {"batch": batch}, T.Shape.of(m.weights, batch, 40), layout, 8, k["sequence"], None,
                   k["busy_us"], pdl=False)
    assert note["why"] == "" and note["additive"] and note["fit"] is not None, note["why"]
    assert all(r["us_per_call"] > 0 for r in note["kernels"]) and note["path"] == m.path
