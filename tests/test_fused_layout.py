"""lab.step.fused.layout: the gemm path's library-call forms, their declared default, and the measured choice.

The selection (`pick`, `measure`) with fake timers: the fastest wins, a tie keeps the default (else the first
declared), a form that raises or disagrees is recorded and skipped, the record's shape. Then, on the CPU
(lab.step.fused.library, no kernel launched): every form computes the eager step's product into its
preallocated output, a plan takes the declared default untimed, a faked timer's choice keeps only the Wt
copies its forms read, and the build phase (lab.experiments.common.methods) writes the declared
`fused_layouts` note. On CUDA (`cuda` marker): every form chosen in turn gives eager's fp32 tokens.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lab.contract import notes as N
from lab.step.fused import layout as L, traffic as T, triton_import_error

TRITON_MISSING = triton_import_error()
needs_triton = pytest.mark.skipif(TRITON_MISSING is not None, reason=f"Triton does not import: {TRITON_MISSING}")


def _trials(**medians: float | str) -> tuple[L.Trial, ...]:
    """Trials in the keyword order: a number is every round's median (us), a string the error."""
    return tuple(L.Trial(f.replace("_", "-"), () if isinstance(v, str) else (v, v, v), v if isinstance(v, str) else "")
                 for f, v in medians.items())


# ------------------------------------------------------------------ the declarations and the pure selection

def test_the_projections_are_the_gemm_paths_library_calls_and_the_default_is_todays_call() -> None:
    assert tuple(p.launch for p in L.PROJECTIONS) == T.LIBRARY
    assert {p.name: str(f) for p, f in zip(L.PROJECTIONS, L.DEFAULT.values())} == {
        "qkv": "lt-t", "proj": "lt-t", "fc": "lt-t", "fc2": "lt-t", "lm_head": "blas-t"}
    for p in L.PROJECTIONS:
        forms = L.candidates(p)
        assert forms[0] == L.DEFAULT[p.name] and sorted(forms) == sorted(L.Form)
    assert [f.transposed for f in L.Form] == [False, True, False, True]
    assert L.copies_bias("blas-n", True) and not L.copies_bias("blas-n", False) and not L.copies_bias("lt-t", True)
    assert L.zero_bias("lt-n", False) and not L.zero_bias("lt-n", True) and not L.zero_bias("blas-t", False)


def test_the_fastest_form_wins_and_the_reason_names_the_default() -> None:
    got = L.pick("fc", "lt-t", _trials(lt_t=45.0, lt_n=20.0, blas_t=30.0, blas_n=21.0), shape=(16, 768, 3072))
    assert (got.chosen, got.timed) == ("lt-n", True)
    assert got.reason == "lt-n fastest: 20.00 us a call (default lt-t: 45.00 us)"
    note = got.as_note()
    assert note["shape"] == [16, 768, 3072] and note["chosen"] == "lt-n" and note["default"] == "lt-t"
    assert list(note["candidates"]) == ["lt-t", "lt-n", "blas-t", "blas-n"]
    assert note["candidates"]["blas-t"] == {"median_us": 30.0, "rounds_us": [30.0, 30.0, 30.0], "error": ""}


def test_a_tie_keeps_the_default_else_the_first_declared() -> None:
    kept = L.pick("qkv", "lt-t", _trials(lt_t=20.1, lt_n=20.0, blas_t=30.0))  # 0.5% apart: within TIE
    assert kept.chosen == "lt-t" and "within 1% of the fastest, lt-n" in kept.reason and "the default" in kept.reason
    first = L.pick("qkv", "lt-t", _trials(lt_t=40.0, lt_n=20.1, blas_t=20.0))  # the default is out of it
    assert first.chosen == "lt-n" and "the first declared kept" in first.reason
    apart = L.pick("qkv", "lt-t", _trials(lt_t=20.3, lt_n=20.0))  # 1.5% apart: not a tie
    assert apart.chosen == "lt-n"


def test_a_form_that_fails_is_recorded_and_skipped() -> None:
    def refused() -> None:
        raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmul\nsecond line")

    timed: list[list[str]] = []

    def timer(bursts):  # the forms' per-round medians, us a burst of 12 calls
        timed.append(list(bursts))
        return {"lt-t": [120.0, 121.2, 118.8], "blas-t": [60.0, 61.2, 58.8]}

    forms = [L.Candidate("lt-t", lambda: None), L.Candidate("lt-n", refused), L.Candidate("blas-t", lambda: None)]
    got = L.measure("proj", "lt-t", forms, 12, timer)
    assert timed == [["lt-t", "blas-t"]]  # the refused form is not timed
    assert got.chosen == "blas-t" and got.trials[0].median_us == pytest.approx(10.0)
    assert got.trials[1].error == "RuntimeError: CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmul"
    assert got.trials[1].median_us is None and got.reason.endswith("; not timed: lt-n")
    assert got.as_note()["candidates"]["lt-n"] == {"median_us": None, "rounds_us": [],
                                                    "error": got.trials[1].error}


def test_a_form_whose_output_differs_from_the_first_is_not_a_candidate() -> None:
    outputs = iter([1.0, 1.0, 2.0])
    forms = [L.Candidate(f, lambda: None, lambda: next(outputs)) for f in ("lt-t", "lt-n", "blas-t")]

    def agree(ref, got):
        return None if ref == got else f"{got} against {ref}"

    got = L.measure("fc2", "lt-t", forms, 1, lambda b: {f: [5.0 if f == "blas-t" else 9.0] for f in b}, agree)
    assert got.chosen == "lt-t" and got.trials[2].error == "output differs from lt-t's: 2.0 against 1.0"


def test_no_form_that_ran_is_an_error_naming_each() -> None:
    def refused() -> None:
        raise ValueError("no")

    with pytest.raises(L.NoForm, match=r"no form of lm_head ran \(blas-t: ValueError: no; lt-t: ValueError: no\)"):
        L.measure("lm_head", "blas-t", [L.Candidate("blas-t", refused), L.Candidate("lt-t", refused)], 1,
                  lambda b: {})


def test_the_record_is_the_declared_note() -> None:
    picks = (L.pick("qkv", "lt-t", _trials(lt_t=9.0, lt_n=5.0)),
             L.declared(L.PROJECTIONS[4], "declared default: not timed"))
    body = L.Choice(picks, True, "timed on a test", False, 1234).as_note()
    note = {"method": "fused", "params": {"batch": 16, "dtype": "float32"}, **body}
    key = N.FUSED_LAYOUTS.key_for(method="fused", shape="b16.float32")
    for experiment in ("cuda_graph_decode", "model_scaling", "peer_generate"):
        assert N.check(experiment, key, note) is None
    assert N.check("model_scaling", key, {k: v for k, v in note.items() if k != "projections"}) is not None
    assert body["projections"]["lm_head"] == {"shape": [0, 0, 0], "default": "blas-t", "chosen": "blas-t",
                                              "timed": False, "reason": "declared default: not timed",
                                              "candidates": {}}
    assert (body["extra_bytes"], body["rounds"], body["calls_per_round"]) == (1234, L.ROUNDS, L.CALLS)


# ------------------------------------------------------------------ the forms bound (lab.step.fused.library), CPU

def _buffers(w, batch: int) -> dict[str, torch.Tensor]:
    from lab.step.fused import library

    bufs = library.buffers(batch, w)
    bufs["logits"] = torch.zeros(batch, int(w.wte.shape[0]), dtype=w.dtype)
    return bufs


@needs_triton
@pytest.mark.parametrize("form", list(L.Form))
def test_every_form_computes_the_eager_product_into_its_own_output(tiny, form: L.Form) -> None:
    from lab.step.fused import library

    _, w = tiny
    torch.manual_seed(0)
    for p in L.PROJECTIONS:
        weight, bias = library.operands(p, w)[-1]
        a = torch.randn(3, weight.shape[1])
        out = torch.full((3, weight.shape[0]), float("nan"))
        zero = torch.zeros(weight.shape[0]) if bias is None else None
        c = library.call(form, p, weight, bias, a, out, weight.t().contiguous(), zero)
        assert (c.name, c.form, c.kwargs["out"] is out) == (p.launch, str(form), True)
        mat2 = c.args[-1]
        assert mat2.is_contiguous() == form.transposed and mat2.shape == (weight.shape[1], weight.shape[0])
        if form.epilogue:  # a 1-D bias: cuBLASLt's epilogue (a zero one for lm_head)
            assert c.fn is torch.addmm and c.args[0].dim() == 1
        elif bias is not None:  # a 2-D bias view: copied into out, then the GEMM with beta 1
            assert c.fn is torch.addmm and c.args[0].shape == out.shape and c.args[0].stride(0) == 0
        else:
            assert c.fn is torch.mm
        ptr = out.data_ptr()
        c()
        ref = torch.nn.functional.linear(a, weight, bias)
        assert out.data_ptr() == ptr and (out - ref).abs().max() <= 1e-5 * ref.abs().max(), (p.name, form)


@needs_triton
def test_a_form_that_reads_wt_or_a_zero_bias_refuses_to_bind_without_it(tiny) -> None:
    from lab.step.fused import library

    _, w = tiny
    qkv, lm = L.PROJECTIONS[0], L.PROJECTIONS[4]
    weight, bias = library.operands(qkv, w)[0]
    a, out = torch.zeros(2, weight.shape[1]), torch.zeros(2, weight.shape[0])
    with pytest.raises(ValueError, match="form lt-n of qkv needs the contiguous copy Wt"):
        library.call("lt-n", qkv, weight, bias, a, out)
    with pytest.raises(ValueError, match="form lt-t of lm_head needs a zero bias"):
        library.call("lt-t", lm, w.wte, None, a, torch.zeros(2, w.wte.shape[0]))


@needs_triton
def test_on_the_cpu_a_gemm_plan_takes_the_declared_default_untimed(tiny) -> None:
    from lab.step.decode import new_state
    from lab.step.fused import library
    from lab.step.fused.launch import LibraryCall
    from lab.step.fused.step import prepare

    _, w = tiny
    plan = prepare(new_state(w, 8, 16), w)
    calls = [x for x in plan.launches if isinstance(x, LibraryCall)]
    assert [(x.name, x.form) for x in calls][:4] == [("qkv_gemm", "lt-t"), ("proj_gemm", "lt-t"),
                                                     ("fc_gemm", "lt-t"), ("fc2_gemm", "lt-t")]
    assert (calls[-1].name, calls[-1].form, calls[-1].fn) == ("lm_head_gemm", "blas-t", torch.mm)
    assert calls[0].fn is torch.addmm and calls[0].args[0] is w.layers[0].attn_b  # today's call, unchanged
    choice = library.choice_of(plan)
    assert choice is not None and not choice.timed and choice.extra_bytes == 0
    assert choice.why == "declared default: forms are timed on CUDA only (here: cpu)"
    assert choice.forms == L.DEFAULT and all(not p.trials for p in choice.picks)
    assert T.Layout.of_plan(plan).forms == ()
    assert library.choice_of(prepare(new_state(w, 1, 16), w)) is None  # the gemv path makes no choice


@needs_triton
def test_a_measured_choice_keeps_only_the_copies_its_forms_read(tiny, monkeypatch) -> None:
    from lab.step.fused import library

    _, w = tiny
    bufs = _buffers(w, 4)
    order = iter(p.name for p in L.PROJECTIONS)
    wins = {"qkv": "lt-n", "fc2": "blas-t", "lm_head": "lt-t"}
    real = L.measure

    def measure(projection, default, forms, per_burst, timer, agree=None, shape=(0, 0, 0)):
        assert projection == next(order) and per_burst == (1 if projection == "lm_head" else w.n_layer)
        fake = lambda b: {f: [1.0 if wins.get(projection) == f else 2.0] * 3 for f in b}  # noqa: E731
        return real(projection, default, forms, per_burst, fake, agree, shape)

    monkeypatch.setattr(L, "measure", measure)
    bound = library.choose_forms(w, bufs, timer=lambda b: {})
    assert bound.choice.timed and bound.choice.why == "timed on cpu"
    assert {k: str(v) for k, v in bound.choice.forms.items()} == {
        "qkv": "lt-n", "proj": "lt-t", "fc": "lt-t", "fc2": "blas-t", "lm_head": "lt-t"}
    assert list(bound.transposed) == ["qkv"] and len(bound.transposed["qkv"]) == w.n_layer
    assert all(t.is_contiguous() and torch.equal(t, lw.attn_w.t()) for t, lw in zip(bound.transposed["qkv"], w.layers))
    assert list(bound.zeros) == ["lm_head"] and not bound.zeros["lm_head"].any()
    kept = sum(t.numel() * t.element_size() for t in bound.transposed["qkv"]) + bound.zeros["lm_head"].numel() * 4
    assert bound.choice.extra_bytes == kept
    assert all(not t.any() for t in bufs.values())  # the measurement's inputs and outputs are zeroed after
    picks = {p.projection: p for p in bound.choice.picks}
    assert all(t.error == "" for t in picks["fc"].trials)  # every form agreed with the default's output
    assert picks["fc"].shape == (4, w.n_embd, 4 * w.n_embd)


@needs_triton
def test_after_a_profiler_residue_the_default_is_kept_untimed(tiny, monkeypatch) -> None:
    from lab.measure import profiler_guard
    from lab.step.fused import library

    _, w = tiny
    monkeypatch.setattr(profiler_guard.GUARD, "residue", "a test's profiler session")

    def timer(bursts):
        raise AssertionError("no timing after a residue")

    bound = library.choose_forms(w, _buffers(w, 4), timer=timer)
    assert not bound.choice.timed and bound.choice.forms == L.DEFAULT and not bound.transposed
    assert bound.choice.why.startswith("declared default: not timed (choosing the fused gemm path's forms refused")


@needs_triton
def test_the_build_phase_writes_the_layout_note(tiny, monkeypatch) -> None:
    """methods.build of the fused method on its gemm path (bound on the CPU, the CUDA-only build faked) notes the
    plan's choice under the shape; a gemv-path build writes none."""
    from lab.contract import profiles
    from lab.contract.catalogue import BY_ID
    from lab.contract.results import Record
    from lab.experiments.common import methods
    from lab.run.context import Context
    from lab.step import decode as D, methods as stepmethods
    from lab.step.fused.step import bind

    _, w = tiny

    def build(name, w_, prompt, max_len, warmup=3, dynamic=None):
        state = D.new_state(w_, prompt.shape[0], max_len)
        fn = bind(state, w_)
        return stepmethods.StepMethod(name, state, w_, prompt, call=lambda: fn(state, w_), path=str(fn.plan.path))

    monkeypatch.setattr(methods, "_why_not", lambda ctx, name, budget: None)
    monkeypatch.setattr(methods.stepmethods, "build", build)
    ctx = Context(BY_ID["model_scaling"], profiles.get("smoke"), None, Record("model_scaling", "", "OK"),
                  SimpleNamespace(experiments=[]), None)
    for batch in (8, 1):
        shape = methods.Shape(batch, "float32", 4, 2, 16, {"size": "tiny", "dtype": "float32", "batch": batch})
        methods.build(ctx, w, ("fused",), torch.zeros(batch, 4, dtype=torch.long), shape, warmup=0, dynamic=None)
    key = N.FUSED_LAYOUTS.key_for(method="fused", shape="tiny.float32.b8")
    assert [k for k in ctx.record.notes if k.startswith("fused_layouts")] == [key]
    note = ctx.record.notes[key]
    assert note["params"]["batch"] == 8 and not note["timed"] and set(note["projections"]) == {
        p.name for p in L.PROJECTIONS}


# ------------------------------------------------------------------ CUDA

@pytest.mark.cuda
@needs_triton
@pytest.mark.parametrize("form", list(L.Form))
def test_gpu_every_form_gives_eagers_fp32_tokens_and_the_note(monkeypatch, form: L.Form) -> None:
    """GPT-2 124M-shaped fp32 at batch 16: the measured choice forced to `form` for every projection (a timer that
    makes it the fastest) gives eager's tokens, replayed from a CUDA graph; the real measurement's choice too."""
    from fused_helpers import assert_equal_run
    from lab.contract.profiles import GPT2
    from lab.step.fused import library
    from lab.step.fused.check import free_running, weights_for

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    w = weights_for("gpt2", "cuda", torch.float32)
    real = library.choose_forms
    seen: list[L.Choice] = []

    def forced(w_, bufs, timer=None):
        bound = real(w_, bufs, lambda b: {f: [1.0 if f == str(form) else 2.0] * 3 for f in b})
        seen.append(bound.choice)
        return bound

    monkeypatch.setattr(library, "choose_forms", forced)
    run = free_running(w, 16, steps=12, prompt_len=16, graph=True)
    assert run["path"] == "gemm" and seen and set(seen[-1].forms.values()) == {form}
    assert all(t.error == "" for p in seen[-1].picks for t in p.trials), seen[-1].as_note()
    assert_equal_run(run, 1e-4, GPT2.n_layer)
    assert run["graph"]["out_equal_direct"] and run["graph"]["logits_identical_direct"], run["graph"]
    monkeypatch.setattr(library, "choose_forms", real)
    measured = free_running(w, 16, steps=12, prompt_len=16, graph=True)  # the choice CUDA events make
    assert_equal_run(measured, 1e-4, GPT2.n_layer)


@pytest.mark.cuda
@needs_triton
def test_gpu_a_built_fused_method_notes_its_measured_choice_and_is_correct() -> None:
    """methods.build on CUDA (GPT-2 124M-shaped fp32, batch 16): the `fused_layouts` note says every projection was
    timed, with a median for every form that ran; methods.check finds the fused tokens equal to eager's (fatal)."""
    from lab.contract import profiles
    from lab.contract.catalogue import BY_ID
    from lab.contract.results import Record
    from lab.experiments.common import methods
    from lab.run.context import Context
    from lab.step.fused.check import weights_for

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    w = weights_for("gpt2", "cuda", torch.float32)
    ctx = Context(BY_ID["model_scaling"], profiles.get("gpu"), None, Record("model_scaling", "", "OK"),
                  SimpleNamespace(experiments=[]), None)
    shape = methods.Shape(16, "float32", 16, 12, 64, {"size": "gpt2", "dtype": "float32", "batch": 16})
    prompt = torch.randint(0, int(w.wte.shape[0]), (16, 16), generator=torch.Generator().manual_seed(0)).cuda()
    ms = methods.build(ctx, w, ("eager", "fused"), prompt, shape, warmup=2, dynamic=None)
    assert set(ms.built) == {"eager", "fused"} and ms.built["fused"].path == "gemm", ctx.record.skipped
    note = ctx.record.notes[N.FUSED_LAYOUTS.key_for(method="fused", shape="gpt2.float32.b16")]
    assert note["timed"] and note["allow_tf32"] is False, note["why"]
    for name, proj in note["projections"].items():
        assert proj["chosen"] in proj["candidates"] and proj["timed"], (name, proj)
        assert all((c["median_us"] or 0) > 0 or c["error"] for c in proj["candidates"].values()), (name, proj)
    methods.check(ctx, ms, w32=w)
    verdict = [c for c in ctx.record.checks if c.params.get("method") == "fused"]
    assert verdict and all(c.passed and c.fatal for c in verdict), verdict
