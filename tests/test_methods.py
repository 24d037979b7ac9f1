"""lab/step/methods.py, the step-method table: rows, the generic build, one graph or a FullGraphError, fresh code objects.

CPU tests build eager, compile-default (Inductor's C++ backend; skipped without a compiler) and
rows made here; the CUDA test builds every row of the table on the tiny model and checks tokens.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from lab.step import decode, methods as stepmethods
from lab.contract import names
from lab.contract.names import Method
from lab.step.methods import METHODS, FullGraphError, MethodSpec
from lab.measure.stepprofile import count_kernels
from lab.measure.timing import HostClock, clock_for
from lab.host.toolchain import probe
from lab.contract.reasons import Code

from step_helpers import seeded_prompt, breaking_step


def test_the_table_names_every_method_once() -> None:
    assert set(METHODS) == {m.value for m in Method}
    assert all(key == row.name for key, row in METHODS.items())
    assert set(stepmethods.COMPILED_METHODS) == {n for n, r in METHODS.items() if r.compiled}
    assert set(names.COMPILED) == set(stepmethods.COMPILED_METHODS)  # the readers without torch ask the contract
    assert METHODS[Method.REDUCE_OVERHEAD_STATIC].static and METHODS[Method.REDUCE_OVERHEAD_STATIC].config
    assert METHODS[Method.COMPILE_GRAPH].graphed and METHODS[Method.GRAPH].graphed
    assert all(r.fullgraph for r in METHODS.values() if r.compiled)


def test_a_row_that_makes_no_sense_is_refused() -> None:
    with pytest.raises(ValueError, match="compiled methods only"):
        MethodSpec(Method.EAGER, mode="reduce-overhead")
    with pytest.raises(ValueError, match="compiled methods only"):
        MethodSpec(Method.GRAPH, config={"coordinate_descent_tuning": True})
    with pytest.raises(ValueError, match="inductor backend"):
        MethodSpec(Method.COMPILE_DEFAULT, compiled=True, backend="eager", mode="reduce-overhead")


def test_unknown_method_is_a_one_line_error(tiny) -> None:
    _, w = tiny
    with pytest.raises(ValueError, match="unknown step method 'warp' \\(choose from eager, graph"):
        stepmethods.build("warp", w, seeded_prompt(), 40)


@pytest.mark.slow
def test_eager_builds_and_decodes_on_cpu(tiny) -> None:
    _, w = tiny
    prompt = seeded_prompt()
    m = stepmethods.build(Method.EAGER, w, prompt, 40)
    assert m.spec is METHODS["eager"] and m.setup_s >= 0 and m.counters["frames"] == 0
    samples = m.decode(10, HostClock(), readback=True)
    assert len(samples) == 10 and all(s > 0 for s in samples)
    assert torch.equal(m.tokens()[:, 8:19], decode.generate_fixed(w, prompt, 11, max_len=40))
    m.start()
    k = count_kernels(m.call, torch.device("cpu"))
    assert k["kernels"] > 10 and k["top"]


def test_entries_are_fresh_code_objects_per_compilation() -> None:
    rows = METHODS
    default = stepmethods.compile_entry(rows["compile-default"], None)
    assert stepmethods.compile_entry(rows["compile+graph"], None) is default  # the same compilation: shared
    others = [stepmethods.compile_entry(rows[n], None) for n in ("reduce-overhead", "reduce-overhead-static")]
    others.append(stepmethods.compile_entry(rows["compile-default"], False))  # dynamic=False compiles apart
    others.append(stepmethods.compile_entry(dataclasses.replace(rows["compile-default"], config={"a": 1}), None))
    # what the guards see: another dtype, or another batch under dynamic=False, is a compilation apart (on the H200
    # a fifth static compile of one code object, bf16 after four fp32 batches, hit Dynamo's recompile limit)
    others.append(stepmethods.compile_entry(rows["compile-default"], False, ("torch.bfloat16", 1)))
    others.append(stepmethods.compile_entry(rows["compile-default"], False, ("torch.float32", 8)))
    assert stepmethods.compile_entry(rows["compile+graph"], False, ("torch.float32", 8)) is others[-1]
    codes = {id(f.__code__) for f in [default, *others]}
    assert len(codes) == 7 and all(f.__code__.co_name.startswith("compiled_decode_step_") for f in others)


def test_a_graph_break_under_a_fullgraph_method_raises_with_dynamos_reason(tiny) -> None:
    _, w = tiny
    row = dataclasses.replace(METHODS["compile-default"], step=breaking_step)
    with pytest.raises(FullGraphError) as caught:
        stepmethods.build(row, w, seeded_prompt(), 40)  # Dynamo stops tracing before Inductor compiles anything
    err = caught.value
    assert err.method == "compile-default"
    assert "torch._dynamo.graph_break()" in err.reason and "breaking_step" in err.reason
    assert "step_helpers.py" in err.reason and "from user code" in err.message
    assert isinstance(err.__cause__, torch._dynamo.exc.Unsupported)


def test_without_fullgraph_the_same_break_is_counted_not_raised(tiny) -> None:
    _, w = tiny
    prompt = seeded_prompt()
    row = dataclasses.replace(METHODS["compile-default"], step=breaking_step, fullgraph=False, backend="eager")
    m = stepmethods.build(row, w, prompt, 40)
    assert m.counters["graph_breaks"] >= 1 and m.counters["frames"] >= 2
    m.decode(10, HostClock(), readback=False)
    assert torch.equal(m.tokens()[:, 8:19], decode.generate_fixed(w, prompt, 11, max_len=40))


def test_recompile_limit_under_fullgraph_names_the_limit() -> None:
    limit = torch._dynamo.exc.Unsupported("Dynamo recompile limit exceeded")
    try:
        raise RuntimeError("Hard failure due to fullgraph=True") from limit
    except RuntimeError as exc:
        plain = stepmethods.dynamo_reason(exc)
    assert plain == "Hard failure due to fullgraph=True"
    hit = getattr(torch._dynamo.exc, "FailOnRecompileLimitHit", None)
    if hit is not None:
        try:
            raise hit("Hard failure due to fullgraph=True") from limit
        except hit as exc:
            assert stepmethods.dynamo_reason(exc) == ("recompile limit reached under fullgraph=True: "
                                                      "Dynamo recompile limit exceeded")


@pytest.fixture(scope="module")
def inductor_here() -> None:
    reason = probe().cxx_reason()
    if reason is not None:
        pytest.skip(f"Inductor's C++ backend cannot compile here: {reason.code}")


@pytest.mark.slow
def test_compile_default_builds_decodes_and_shares_its_compilation(tiny, inductor_here) -> None:
    _, w = tiny
    prompt = seeded_prompt()
    torch._dynamo.reset()  # counts below start from no compiled code
    m = stepmethods.build(Method.COMPILE_DEFAULT, w, prompt, 40)
    assert m.counters == {"frames": 1, "graphs": 1, "graph_breaks": 0, "cudagraph_skips": 0}
    assert m.setup_s > 0
    m.decode(10, HostClock(), readback=False)
    assert torch.equal(m.tokens()[:, 8:19], decode.generate_fixed(w, prompt, 11, max_len=40))
    again = stepmethods.build(Method.COMPILE_DEFAULT, w, prompt, 40)  # same compilation: its code is reused
    assert again.counters["frames"] == 0


def test_profiling_a_compiled_step_does_not_recompile_it(tiny, monkeypatch) -> None:
    """The profiler calls the step as it is timed, under no_grad: Dynamo guards grad mode, and a profile with grad
    on recompiled the step on the H200 (7 s a batch, and the fifth compile of one code object hit the limit)."""
    from lab.measure.dynamo_tools import dynamo_counters

    _, w = tiny
    row = dataclasses.replace(METHODS["compile-default"], name="compile-eager-backend", backend="eager")
    monkeypatch.setitem(METHODS, row.name, row)
    m = stepmethods.build(row.name, w, seeded_prompt(), 40, dynamic=False)
    m.start()
    before = dynamo_counters()
    k = count_kernels(m.call, torch.device("cpu"))
    assert k["kernels"] > 0 and stepmethods.compiled_frames(before, dynamo_counters()) == 0


def test_adding_a_row_is_enough_to_add_a_method(tiny, inductor_here, monkeypatch) -> None:
    """A config-patched compile-default, with a weight preparation that sees the patch: one row."""
    _, w = tiny
    prompt = seeded_prompt()
    import torch._inductor.config as inductor_config

    seen: list[bool] = []

    def prepare(weights):
        seen.append(bool(inductor_config.coordinate_descent_tuning))
        return weights

    row = dataclasses.replace(METHODS["compile-default"], name="compile-default-cdt",
                              config={"coordinate_descent_tuning": True}, prepare=prepare)
    monkeypatch.setitem(METHODS, row.name, row)
    m = stepmethods.build("compile-default-cdt", w, prompt, 40)
    assert m.name == "compile-default-cdt" and seen == [True]
    assert inductor_config.coordinate_descent_tuning is False  # the patch ends with the build
    assert m.counters["frames"] == 1  # its own compilation, not compile-default's cached one
    m.decode(10, HostClock(), readback=False)
    assert torch.equal(m.tokens()[:, 8:19], decode.generate_fixed(w, prompt, 11, max_len=40))


@pytest.mark.cuda
def test_every_row_builds_on_cuda_and_decodes_like_eager(tiny) -> None:
    """Every method of the table on the tiny model, fp32: the minutes-long compiles aside (max-autotune,
    coordinate descent: the gpu-full profile runs them), and rows this device or torch cannot run."""
    model, _ = tiny
    from lab.experiments.cuda_graph_decode import COSTLY
    from lab.step.model import extract_weights

    w = extract_weights(model, device="cuda")
    prompt = seeded_prompt().cuda()
    ref = decode.generate_fixed(w, prompt, 11, max_len=40)
    for name, row in METHODS.items():
        if name in COSTLY or stepmethods.unavailable(row, prompt.device) is not None:
            continue
        m = stepmethods.build(name, w, prompt, 40)
        m.decode(10, clock_for("cuda"), readback=False)
        assert torch.equal(m.tokens()[:, 8:19], ref), name
        assert (m.graphed is not None) == row.graphed, name
        if row.compiled:
            assert m.counters["graph_breaks"] == 0, name
        if name == Method.REDUCE_OVERHEAD_STATIC:
            assert m.counters["cudagraph_skips"] == 0, m.skip_reasons


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


def test_a_bound_row_is_made_for_its_state_before_the_first_call(tiny) -> None:
    _, w = tiny
    prompt = seeded_prompt()
    seen: list[tuple[int, int]] = []

    def bind(state, weights):
        seen.append((id(state), int(state.pos.item())))  # prepared after the prefill, before any step
        return lambda s, _w: decode.decode_step(s, weights)

    m = stepmethods.build(MethodSpec("bound", bind=bind), w, prompt, 40)
    assert seen == [(id(m.state), 8)]
    m.decode(10, HostClock(), readback=False)
    assert torch.equal(m.tokens()[:, 8:19], decode.generate_fixed(w, prompt, 11, max_len=40))
