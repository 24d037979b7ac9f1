"""The step-method table: rows, the generic build, one graph or a FullGraphError, fresh code objects.

CPU tests build eager, compile-default (Inductor's C++ backend; skipped without a compiler) and
rows made here; the CUDA test builds every row of the table on the tiny model and checks tokens.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from lab.step import decode, methods as stepmethods
from lab.contract.names import Method
from lab.step.methods import METHODS, FullGraphError, MethodSpec
from lab.measure.stepprofile import count_kernels
from lab.measure.timing import HostClock, clock_for
from lab.host.toolchain import probe


def _prompt(batch: int = 2, length: int = 8) -> torch.Tensor:
    return torch.randint(0, 512, (batch, length), generator=torch.Generator().manual_seed(0))


def breaking_step(state: decode.DecodeState, w) -> torch.Tensor:
    """The decode step with a deliberate graph break after it."""
    logits = decode.decode_step(state, w)
    torch._dynamo.graph_break()
    return logits


def test_the_table_names_every_method_once() -> None:
    assert set(METHODS) == {m.value for m in Method}
    assert all(key == row.name for key, row in METHODS.items())
    assert set(stepmethods.COMPILED_METHODS) == {n for n, r in METHODS.items() if r.compiled}
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
        stepmethods.build("warp", w, _prompt(), 40)


def test_eager_builds_and_decodes_on_cpu(tiny) -> None:
    _, w = tiny
    prompt = _prompt()
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
        stepmethods.build(row, w, _prompt(), 40)  # Dynamo stops tracing before Inductor compiles anything
    err = caught.value
    assert err.method == "compile-default"
    assert "torch._dynamo.graph_break()" in err.reason and "breaking_step" in err.reason
    assert "test_stepmethods.py" in err.reason and "from user code" in err.message
    assert isinstance(err.__cause__, torch._dynamo.exc.Unsupported)


@pytest.mark.slow
def test_without_fullgraph_the_same_break_is_counted_not_raised(tiny) -> None:
    _, w = tiny
    prompt = _prompt()
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
    prompt = _prompt()
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
    m = stepmethods.build(row.name, w, _prompt(), 40, dynamic=False)
    m.start()
    before = dynamo_counters()
    k = count_kernels(m.call, torch.device("cpu"))
    assert k["kernels"] > 0 and stepmethods.compiled_frames(before, dynamo_counters()) == 0


def test_adding_a_row_is_enough_to_add_a_method(tiny, inductor_here, monkeypatch) -> None:
    """A config-patched compile-default, with a weight preparation that sees the patch: one row."""
    _, w = tiny
    prompt = _prompt()
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


def test_cuda_graph_decode_records_a_broken_graph_as_a_failed_check(monkeypatch) -> None:
    """The experiment goes on with the other methods and ends FAILED with Dynamo's reason."""
    from lab.contract import catalogue, profiles
    from lab.experiments import cuda_graph_decode
    from lab.contract.results import Record, Results, RunInfo
    from lab.run.context import Context, ModelCache
    from lab.run.runner import _finish_status

    broken = dataclasses.replace(METHODS["compile-default"], step=breaking_step, backend="eager")
    monkeypatch.setitem(METHODS, "compile-default", broken)
    profile = profiles.get("smoke").with_options(
        "cuda_graph_decode", methods=["eager", "compile-default"], bf16_batches=[], rounds=2, steps=4,
        readback=[False], batches=[1])
    spec = catalogue.BY_ID["cuda_graph_decode"]
    rec = Record(id=spec.id, title=spec.title, status="OK")
    results = Results(run=RunInfo(profile="smoke", started_at=""), manifest={}, experiments=[rec])
    cuda_graph_decode.run(Context(spec, profile, probe(), rec, results, ModelCache(profile, {"source": "random"})))
    failed = [c for c in rec.checks if not c.passed]
    assert [c.name for c in failed] == ["compile-default compiles the step as one graph (batch=1 dtype=float32)"]
    assert failed[0].fatal and "torch._dynamo.graph_break()" in failed[0].detail
    assert rec.metric("step_ms", method="eager", batch=1, dtype="float32", readback=False).value > 0
    _finish_status(rec)
    assert rec.status == "FAILED" and "one graph" in rec.reason.message


def test_a_method_that_reuses_a_compilation_pays_for_it_in_its_break_even(monkeypatch) -> None:
    """compile+graph reuses compile-default's compiled code (its setup_s is the capture alone); its break-even must
    include that compile, or the page says it pays after 7 steps when it needs thousands (the H200 reference)."""
    from lab.contract import catalogue, profiles
    from lab.measure.breakeven import break_even_calls
    from lab.experiments import cuda_graph_decode
    from lab.contract.results import Record, Results, RunInfo
    from lab.run.context import Context, ModelCache

    plain = dataclasses.replace(METHODS["compile-default"], backend="eager")
    monkeypatch.setitem(METHODS, "compile-default", plain)
    monkeypatch.setitem(METHODS, "reduce-overhead", dataclasses.replace(plain, name="reduce-overhead"))  # same key
    profile = profiles.get("smoke").with_options(
        "cuda_graph_decode", methods=["eager", "compile-default", "reduce-overhead"], bf16_batches=[], rounds=2,
        steps=4, readback=[False], batches=[3], dynamic=False)
    spec = catalogue.BY_ID["cuda_graph_decode"]
    rec = Record(id=spec.id, title=spec.title, status="OK")
    results = Results(run=RunInfo(profile="smoke", started_at=""), manifest={}, experiments=[rec])
    cuda_graph_decode.run(Context(spec, profile, probe(), rec, results, ModelCache(profile, {"source": "random"})))
    p = {"batch": 3, "dtype": "float32"}
    value = lambda name, **q: rec.metric(name, **p, **q).value  # noqa: E731
    assert value("compiled_frames", method="reduce-overhead") == 0  # it reused compile-default's code
    own, first = value("setup_s", method="reduce-overhead"), value("setup_s", method="compile-default")
    eager, ms = (value("step_ms", method=m, readback=False) for m in ("eager", "reduce-overhead"))
    assert value("break_even_steps", method="reduce-overhead") == break_even_calls(own + first, eager, ms)
    assert rec.notes["break_even_includes.b3.float32"] == {
        "reduce-overhead": "compile-default's compile (its setup_s reused that compilation)"}


@pytest.mark.cuda
def test_every_row_builds_on_cuda_and_decodes_like_eager(tiny) -> None:
    """Every method of the table on the tiny model, fp32: the minutes-long compiles aside (max-autotune,
    coordinate descent: the gpu-full profile runs them), and rows this device or torch cannot run."""
    model, _ = tiny
    from lab.experiments.cuda_graph_decode import COSTLY
    from lab.step.model import extract_weights

    w = extract_weights(model, device="cuda")
    prompt = _prompt().cuda()
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
