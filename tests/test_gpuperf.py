"""Closer to the floor (issue 13): the new step methods, teacher forcing, the distance-to-floor metrics,
the gpu profiles' plan, and cuda_graph_decode's flow on the CPU (the GPU runs are the lead's).

The experiment needs CUDA to run for real; here it is driven through its Context on the smoke profile
with methods that run on the CPU (eager, compile-default with Dynamo's eager backend) and one that
cannot (graph: GraphedStep needs CUDA), which must be recorded as a skipped part, not lost.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from lab.step import decode, methods as stepmethods, teacher
from lab.step.ceilings import attended_slots, step_bytes
from lab.contract.names import Method
from lab.contract.reasons import Code
from lab.step.methods import METHODS, MethodSpec
from lab.measure.stepprofile import busy_us, count_kernels
from lab.measure.timing import HostClock


def _prompt(batch: int = 2, length: int = 8) -> torch.Tensor:
    return torch.randint(0, 512, (batch, length), generator=torch.Generator().manual_seed(0))


# ------------------------------------------------------------------ the table's new rows

def test_lever_rows_name_switches_this_torch_has() -> None:
    levers = {n: METHODS[n] for n in (Method.COMPILE_GRAPH_COMBO, Method.COMPILE_GRAPH_PDL,
                                     Method.COMPILE_GRAPH_COORDESC)}
    for name, row in levers.items():
        assert row.compiled and row.graphed and len(row.config) == 1, name  # one switch on compile+graph
    for name, row in METHODS.items():
        assert stepmethods.inductor_config_names(list(row.config)) == [], name
    made_up = dataclasses.replace(METHODS[Method.COMPILE_GRAPH_COMBO], config={"triton.no_such_switch": True})
    code, message = stepmethods.unavailable(made_up, torch.device("cpu"))
    assert code == Code.NOT_IN_THIS_TORCH and "torch._inductor.config.triton.no_such_switch" in message
    assert METHODS[Method.MAX_AUTOTUNE_GRAPH].graphed and METHODS[Method.MAX_AUTOTUNE_GRAPH].mode == \
        METHODS[Method.MAX_AUTOTUNE].mode  # one compile, shared by the plain and the captured row
    assert stepmethods.compile_entry(METHODS[Method.MAX_AUTOTUNE_GRAPH], False) is \
        stepmethods.compile_entry(METHODS[Method.MAX_AUTOTUNE], False)


def test_rows_say_why_they_cannot_run_here(monkeypatch) -> None:
    cpu = torch.device("cpu")
    for name in (Method.FUSED_PDL, Method.FUSED_PDL_PREFETCH, Method.COMPILE_GRAPH_PDL):
        code, message = stepmethods.unavailable(METHODS[name], cpu)
        assert code == Code.NOT_ON_THIS_DEVICE and "compute capability 9.0" in message, name
    import lab.step.fused

    monkeypatch.setattr(lab.step.fused, "triton_import_error", lambda: "ImportError: no module named triton")
    code, message = stepmethods.unavailable(METHODS[Method.FUSED], cpu)
    assert code == Code.NO_TRITON and "no module named triton" in message
    with pytest.raises(ValueError, match="bind replaces the step"):
        MethodSpec(Method.FUSED, compiled=True, bind=lambda s, w: decode.decode_step)
    with pytest.raises(ValueError, match="unknown need"):
        MethodSpec(Method.FUSED, needs=("tpu",))


def test_gpu_busy_time_is_the_union_of_kernel_intervals() -> None:
    assert busy_us([]) == 0.0
    assert busy_us([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (5.5, 5.7)]) == 4.0  # overlap counted once
    assert busy_us([(4.0, 5.0), (0.0, 1.0)]) == 2.0  # any order


def _bad_feedback_step(state: decode.DecodeState, w) -> torch.Tensor:
    """The eager step, but it feeds itself a wrong token: free-running it diverges at once."""
    logits = decode.decode_step(state, w)
    state.tok.copy_((state.tok + 1) % logits.shape[-1])
    return logits


def test_a_bound_row_is_made_for_its_state_before_the_first_call(tiny) -> None:
    _, w = tiny
    prompt = _prompt()
    seen: list[tuple[int, int]] = []

    def bind(state, weights):
        seen.append((id(state), int(state.pos.item())))  # prepared after the prefill, before any step
        return lambda s, _w: decode.decode_step(s, weights)

    m = stepmethods.build(MethodSpec("bound", bind=bind), w, prompt, 40)
    assert seen == [(id(m.state), 8)]
    m.decode(10, HostClock(), readback=False)
    assert torch.equal(m.tokens()[:, 8:19], decode.generate_fixed(w, prompt, 11, max_len=40))


# ------------------------------------------------------------------ teacher forcing

def test_teacher_forcing_judges_each_step_not_the_divergence(tiny) -> None:
    _, w = tiny
    prompt = _prompt()
    ref = teacher.reference(w, prompt, 40, 12)
    assert ref.tokens.shape == (12, 2, 1) and ref.logits.shape == (12, 2, 512) and ref.start_pos == 8
    same = teacher.teacher_forced(stepmethods.build(Method.EAGER, w, prompt, 40), ref)
    assert (same.agreement, same.max_logit_error, same.first_disagreement) == (1.0, 0.0, None)
    bad = stepmethods.build(MethodSpec("bad-feedback", step=_bad_feedback_step), w, prompt, 40)
    bad.decode(12, HostClock(), readback=False)  # free-running: its tokens part from eager's at once
    assert not torch.equal(bad.tokens()[:, 9:20], ref.argmax.T[:, :11])
    forced = teacher.teacher_forced(bad, ref)  # fed eager's tokens, every step's logits are eager's
    assert (forced.agreement, forced.max_logit_error) == (1.0, 0.0)
    from lab.step.model import extract_weights

    low = extract_weights(tiny[0], dtype=torch.bfloat16)
    bf16 = teacher.teacher_forced(stepmethods.build(Method.EAGER, low, prompt, 40), ref)
    assert 0.0 < bf16.max_logit_error < 0.1 * float(ref.logits.abs().max())  # bf16 rounding, not a wrong model
    with pytest.raises(ValueError, match="another prompt"):
        teacher.teacher_forced(stepmethods.build(Method.EAGER, w, _prompt(length=7), 40), ref)


# ------------------------------------------------------------------ bytes a step must read

def test_bytes_count_the_attended_cache_not_the_buffer(tiny) -> None:
    _, w = tiny
    assert attended_slots(16, 128) == 80.5  # positions 16..143 read 17..144 slots
    L, E = w.n_layer, w.n_embd
    assert step_bytes(w, 2, 10) - step_bytes(w, 2, 0) == 2 * L * 2 * 10 * E * 4


# ------------------------------------------------------------------ the profiles' plan

def test_gpu_profiles_plan_every_method() -> None:
    from lab.contract import catalogue, profiles
    from lab.run.context import options_for
    from lab.experiments.cuda_graph_decode import COSTLY

    spec = catalogue.BY_ID["cuda_graph_decode"]
    gpu = options_for(spec, profiles.get("gpu"))
    full = options_for(spec, profiles.get("gpu-full"))
    assert gpu.dynamic is False and full.dynamic is None  # the two runs side by side: what dynamic=False changes
    assert not set(COSTLY) & set(gpu.methods) and not gpu.max_autotune
    assert {Method.FUSED, Method.FUSED_PDL, Method.FUSED_PDL_PREFETCH, Method.COMPILE_GRAPH_COMBO,
            Method.COMPILE_GRAPH_PDL} <= set(gpu.methods)
    assert set(full.methods) | {Method.MAX_AUTOTUNE, Method.MAX_AUTOTUNE_GRAPH} == set(METHODS) and full.max_autotune
    assert set(gpu.sweep_methods) <= set(gpu.methods) and Method.EAGER in gpu.sweep_methods
    cost = options_for(catalogue.BY_ID["compile_cost"], profiles.get("gpu"))
    cost_full = options_for(catalogue.BY_ID["compile_cost"], profiles.get("gpu-full"))
    assert cost.depths == (12,) and cost_full.depths == (2, 12) and cost_full.mlp_trials >= 1


# ------------------------------------------------------------------ the experiment's flow on the CPU

def test_cuda_graph_decode_flow_on_the_cpu(monkeypatch) -> None:
    from lab.contract import catalogue, profiles
    from lab.experiments import cuda_graph_decode
    from lab.contract.results import Record, Results, RunInfo
    from lab.run.context import Context, ModelCache
    from lab.run.runner import _finish_status
    from lab.host.toolchain import probe

    # compile-default through Dynamo with its eager backend: a compiled method without a C++ compiler
    monkeypatch.setitem(METHODS, "compile-default", dataclasses.replace(METHODS["compile-default"], backend="eager"))
    profile = profiles.get("smoke").with_options(
        "cuda_graph_decode", methods=["eager", "compile-default", "graph", "fused-pdl"],
        sweep_methods=["eager"], bf16_methods=["eager", "compile-default"], bf16_batches=[1], rounds=2,
        sweep_rounds=2, steps=4, readback=[False, True], readback_batches=[1], batches=[1, 2])
    spec = catalogue.BY_ID["cuda_graph_decode"]
    rec = Record(id=spec.id, title=spec.title, status="OK")
    results = Results(run=RunInfo(profile="smoke", started_at=""), manifest={}, experiments=[rec])
    cuda_graph_decode.run(Context(spec, profile, probe(), rec, results, ModelCache(profile, {"source": "random"})))
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


@pytest.mark.cuda
def test_gpu_busy_time_of_a_step_on_cuda(tiny) -> None:
    """On the device: busy time is the union of the step's kernels, within their summed time and their span."""
    from lab.step.model import extract_weights

    w = extract_weights(tiny[0], device="cuda")
    for name in (Method.EAGER, Method.GRAPH):
        m = stepmethods.build(name, w, _prompt().cuda(), 40)
        m.start()
        k = count_kernels(m.call, torch.device("cuda"))
        assert k["kernels"] > 10 and 0 < k["busy_us"] <= k["span_us"] + 1e-3, (name, k)
        assert k["busy_us"] <= k["device_us"] + 1e-3, (name, k)
