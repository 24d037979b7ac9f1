"""Measuring a set of step methods at one shape: build, check, time, then profile — the one way the lab does it.

cuda_graph_decode and every sweep that compares step methods (model_scaling, peer_generate) go
through these four steps, in this order, each recording under the shape's params (plus `method`)
only the metrics its experiment's catalogue entry declares:

1. `build`: each method (a row of lab.step.methods) made ready once, its setup (compile, capture)
   timed as `setup_s`; a method this host, torch or the budget cannot run is a skipped part with its
   reason; a method that needs one graph and gets several is a failed check with Dynamo's reason. The
   hand-fused step on its gemm path also notes how each projection calls the library (`fused_layouts`).
2. `check`: one free-running decode per method outside the timed path (agreement with eager and the
   largest logit difference, recorded as data), then the correctness rule of lab.step.correctness
   (exact tokens for eager's own kernels in fp32, the teacher-forced rule otherwise), recorded as
   the `correct` metric and a check.
3. `time`: rounds in rotating order over (method, readback), each turn between two samples of the host-speed
   index (lab.measure.hostspeed); per method the median step with its 95% interval (a bootstrap over rounds), the
   per-round medians and the index of each round, the speedup over eager with its interval (rounds paired), the
   saving per step and the steps its setup takes to pay back (`break_even_steps`), MBU from the method's own step time, and what the host's speed did to it
   (lab.experiments.common.hostspeed: its sensitivity, its step and speedup at the reference host speed).
4. `profile`, last: kernels per step, their GPU time, the GPU-busy time and the gap (the median step
   minus the busy time), top kernels; for the hand-fused step also the kernel-by-kernel table of time, bytes
   and achieved bandwidth (the `fused_kernels` note, lab.step.fused.breakdown). After a profile no timing may
   follow in the process (lab.measure.profiler_guard), so a caller that measures several shapes profiles
   each shape after all of its timing (cuda_graph_decode: after every batch's).
"""

from __future__ import annotations

import functools
import statistics
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch

from lab.contract import metrics as M, notes
from lab.contract.names import Method, Param as P
from lab.contract.reasons import Code
from lab.experiments.common import hostspeed
from lab.measure import compiletrace, stepprofile
from lab.measure.breakeven import break_even_calls
from lab.measure.dynamo_tools import dynamo_counters
from lab.step import ceilings, correctness, teacher
from lab.step import methods as stepmethods
from lab.step.model import Weights


@dataclass(frozen=True)
class Shape:
    """What one measurement is of: the batch, dtype and decode length, and the params every metric carries."""

    batch: int
    dtype: str
    prompt_len: int
    steps: int
    max_len: int
    params: dict[str, Any]  # e.g. {"batch": 1, "dtype": "float32"} or {"size": ..., "dtype": ..., "batch": ...}
    readback_param: bool = False  # the step's timings carry a `readback` param (cuda_graph_decode's)

    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.params.items())


@dataclass
class MethodSet:
    """The methods of one shape and what was measured of them."""

    shape: Shape
    weights: Weights
    built: dict[str, stepmethods.StepMethod] = field(default_factory=dict)
    rounds: dict[tuple[str, bool], list[list[float]]] = field(default_factory=dict)  # (method, readback) -> rounds
    ms: dict[tuple[str, bool], float] = field(default_factory=dict)
    tokens: torch.Tensor | None = None  # the reference method's greedy tokens
    kernels: dict[str, int] = field(default_factory=dict)

    def step_ms(self, readback: bool = False) -> dict[str, float]:
        return {n: ms for (n, rb), ms in self.ms.items() if rb == readback}

    def setup_s(self, name: str) -> float:
        """What getting `name` ready cost, as stored (`setup_s`), with the compile it reused (`compiled_by`)."""
        m, reused = self.built[name], self.built.get(self.built[name].compiled_by or "")
        return max(0.0, round(m.setup_s, 4) + (round(reused.setup_s, 4) if reused is not None else 0.0))


def record(ctx: Any, values: dict[M.MetricSpec, Any], shape: Shape, **params: Any) -> None:
    """Metrics under the shape's params, each if the experiment declares it (a sweep without MBU does not)."""
    ctx.metrics({spec: value for spec, value in values.items() if spec in ctx.spec.metrics}, **shape.params, **params)


def needs_cuda(name: str) -> bool:
    """Whether a step method can only run on CUDA (manual capture, cudagraph trees)."""
    spec = stepmethods.method_spec(name)
    return spec.graphed or spec.tree_steps


def _why_not(ctx: Any, name: str, budget: Any) -> tuple[Code, str] | None:
    spec = stepmethods.method_spec(name)
    if needs_cuda(name) and ctx.device.type != "cuda":
        return Code.NO_CUDA, f"{name} captures CUDA graphs: run on a host where torch sees a CUDA device"
    why = stepmethods.unavailable(spec, ctx.device)
    if why is not None:
        return Code(why[0]), why[1]
    toolchain = getattr(ctx, "toolchain", None)
    if spec.compiled and spec.backend == "inductor" and toolchain is not None:
        missing = toolchain.reason_for("inductor", ctx.device.type)
        if missing is not None:
            return Code(missing.code), missing.message
    if budget is not None and spec.compiled:
        text = budget.why_not()
        if text is not None:
            return Code.PROFILE_BUDGET, text
    return None


def build(ctx: Any, w: Weights, names: tuple[str, ...], prompt: torch.Tensor, shape: Shape, *, warmup: int,
          dynamic: bool | None, budget: Any = None, trace: bool = False) -> MethodSet:
    """Each method made ready once; what cannot be is a skipped part or a failed check, never silently absent."""
    out = MethodSet(shape, w)
    for name in names:
        item = f"{name} ({shape.label()})"
        why = _why_not(ctx, name, budget)
        if why is not None:
            ctx.skip(item, *why)
            continue
        spec = stepmethods.method_spec(name)
        ctx.progress(f"{shape.label()}: preparing {name}")
        try:
            with compiletrace.traced(ctx, item, enabled=trace and spec.compiled):
                m = stepmethods.build(name, w, prompt, shape.max_len, warmup=warmup, dynamic=dynamic)
        except stepmethods.FullGraphError as exc:  # the method needs one graph: a failed check with Dynamo's reason
            ctx.check(f"{name} compiles the step as one graph ({shape.label()})", False, detail=exc.reason,
                      **shape.params, method=name)
            continue
        except Exception as exc:
            if name == Method.EAGER:
                raise
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            ctx.skip(item, Code.COMPILE_FAILED, f"getting it ready raised {type(exc).__name__}: {first} (traceback "
                                                "in the notes)")
            ctx.note(notes.BUILD_ERROR.key_for(name, '.'.join(str(v) for v in shape.params.values())),
                     traceback.format_exc()[-3000:])
            continue
        finally:
            if budget is not None and spec.compiled:
                budget.spend()
        out.built[name] = m
        _record_setup(ctx, name, m, shape)
        if m.path == "gemm":  # the hand-fused step on its library-GEMM path: how it calls the library, and why
            _fused_layouts(ctx, name, m, shape)
    return out


def _record_setup(ctx: Any, name: str, m: stepmethods.StepMethod, shape: Shape) -> None:
    record(ctx, {M.SETUP_S: round(m.setup_s, 4)}, shape, method=name)
    if name in stepmethods.COMPILED_METHODS and m.counters:
        record(ctx, {M.DYNAMO_GRAPHS: m.counters["graphs"], M.GRAPH_BREAKS: m.counters["graph_breaks"],
                     M.COMPILED_FRAMES: m.counters["frames"], M.CUDAGRAPH_SKIPS: m.counters["cudagraph_skips"]},
               shape, method=name)
        if m.skip_reasons:
            ctx.note(notes.CUDAGRAPH_SKIP_REASONS.key_for(name), sorted(set(m.skip_reasons)))


def _fused_layouts(ctx: Any, name: str, m: stepmethods.StepMethod, shape: Shape) -> None:
    """The `fused_layouts` note: each projection's library-call form as the plan was built with it (on CUDA measured
    then, lab.step.fused.library.choose_forms), with every candidate's median."""
    from lab.step.fused import breakdown, library

    plan = breakdown.plan_of(m.state)
    choice = None if plan is None else library.choice_of(plan)
    if choice is None:
        ctx.progress(f"{name} ({shape.label()}): no fused plan bound to its state, no layout note")
        return
    ctx.note(notes.FUSED_LAYOUTS.key_for(method=name, shape=_note_shape(shape)),
             {P.METHOD: name, "params": dict(shape.params), **choice.as_note()})


def agreement(tokens: torch.Tensor, reference: torch.Tensor, start: int, end: int) -> float:
    """The share of greedy tokens in [start, end) equal to the reference's: the lab's one token agreement."""
    return float((tokens[:, start:end] == reference[:, start:end]).float().mean().item())


def check(ctx: Any, ms: MethodSet, *, w32: Weights | None = None, forced: bool = False,
          reference_method: str = Method.EAGER, record_reference: bool = False) -> None:
    """Free-running agreement as data, then the correctness rule per method (lab.step.correctness).

    `w32`: fp32 weights for the teacher-forced reference (fp32 eager); without them the methods that the
    exact rule does not cover are judged on free-running equality alone (a non-fatal check says so).
    `forced`: record every method's teacher-forced figures, not only where the rule needs them.
    `record_reference`: also record the reference's agreement with itself (cuda_graph_decode's tables list it)."""
    shape, built = ms.shape, ms.built
    if not built:
        return
    ref_name = reference_method if reference_method in built else next(iter(built))
    for m in built.values():
        m.decode(shape.steps, ctx.clock, readback=False)
    ref = built[ref_name]
    ms.tokens = ref.tokens()
    end = shape.prompt_len + shape.steps + 1
    free: dict[str, float] = {}
    for name, m in built.items():
        agree = agreement(m.tokens(), ms.tokens, shape.prompt_len, end)
        free[name] = agree
        diff = (m.logits.float() - ref.logits.float()).abs().max().item() if m.logits is not None and \
            ref.logits is not None else None
        if name != ref_name or record_reference:
            record(ctx, {M.TOKEN_AGREEMENT: round(agree, 6), M.MAX_LOGIT_DIFF: diff, M.TOKENS_EQUAL: agree == 1.0},
                   shape, method=name)
    forced_figures, baseline = _teacher_forced(ctx, ms, w32, free, forced) if w32 is not None else ({}, None)
    for name in built:
        if name == ref_name and shape.dtype == "float32":  # the reference itself
            record(ctx, {M.CORRECT: True}, shape, method=name)
            continue
        if correctness.exact_rule(name, shape.dtype) or (shape.dtype == "float32" and free[name] == 1.0):
            verdict = correctness.exact(free[name])
        elif name in forced_figures and baseline is not None:
            verdict = correctness.teacher_forced(*forced_figures[name], baseline, rows=shape.steps * shape.batch)
        else:
            verdict = correctness.Verdict(free[name] == 1.0, "exact tokens (no teacher-forced reference)",
                                          f"free-running token agreement {free[name]:.4f}")
        record(ctx, {M.CORRECT: verdict.correct}, shape, method=name)
        fatal = shape.dtype == "float32"
        ctx.check(f"{name} is correct by the {verdict.rule} rule ({shape.label()})", verdict.correct,
                  detail=verdict.detail, fatal=fatal, **shape.params, method=name)


def _teacher_forced(ctx: Any, ms: MethodSet, w32: Weights, free: dict[str, float],
                    forced: bool) -> tuple[dict[str, tuple[float, float]], correctness.Baseline | None]:
    """(agreement, largest logit error) against fp32 eager for the methods the rule or `forced` needs, and the
    baseline they are judged against: the fp32 allowance, or bf16 eager's own figures (None: nothing to judge)."""
    shape = ms.shape
    need = [n for n in ms.built if forced or shape.dtype != "float32"
            or (not correctness.exact_rule(n, shape.dtype) and free[n] != 1.0)]
    if shape.dtype != "float32" and Method.EAGER in ms.built and Method.EAGER not in need:
        need.insert(0, Method.EAGER)  # bf16 eager's own figures are the baseline
    if shape.dtype == "float32":
        need = [n for n in need if n != Method.EAGER]  # fp32 eager is the reference itself
    if not need:
        return {}, None
    first = ms.built[need[0]]
    ref = teacher.reference(w32, first.prompt, shape.max_len, shape.steps)
    figures: dict[str, tuple[float, float]] = {}
    for name in need:
        r = teacher.teacher_forced(ms.built[name], ref)
        figures[name] = (r.agreement, r.max_logit_error)
        record(ctx, {M.TEACHER_FORCED_AGREEMENT: round(r.agreement, 6),
                     M.TEACHER_FORCED_MAX_LOGIT_ERROR: r.max_logit_error}, shape, method=name)
        if r.first_disagreement is not None:
            ctx.note(notes.FIRST_DISAGREEMENT.key_for(name, ".".join(str(v) for v in shape.params.values())),
                     r.first_disagreement)
    if shape.dtype == "float32":
        return figures, correctness.fp32_baseline(float(ref.logits.abs().max()))
    if Method.EAGER in figures:
        return figures, correctness.Baseline(*figures[Method.EAGER], "bf16 eager")
    return figures, None


def time(ctx: Any, ms: MethodSet, rounds: int, readbacks: tuple[bool, ...] = (False,),
         readback_methods: tuple[str, ...] | None = None, bandwidth_gbps: float | None = None,
         eager_speedup: bool = False) -> None:
    """Rotating rounds over (method, readback): step time with its interval, speedup with its interval, MBU.
    `eager_speedup`: also record eager's own speedup (1, interval [1, 1]), as cuda_graph_decode's tables list it."""
    shape, built = ms.shape, ms.built
    if not built:
        return
    before = dynamo_counters()
    pairs = [(n, rb) for n in built for rb in readbacks if not rb or readback_methods is None or n in readback_methods]
    ctx.progress(f"{shape.label()}: timing {len(built)} methods, {rounds} rounds")
    turns: hostspeed.Turns = {  # each turn's name in the host index's note, its metrics' params, the turn
        f"{n}|{rb}": ({**shape.params, P.METHOD: n, **({P.READBACK: rb} if shape.readback_param else {})},
                      functools.partial(built[n].decode, shape.steps, ctx.clock, readback=rb)) for n, rb in pairs}
    samples = hostspeed.timed(ctx, turns, rounds, shape.params, _note_shape(shape))
    frames = stepmethods.compiled_frames(before, dynamo_counters())
    if M.RECOMPILES_DURING_TIMING in ctx.spec.metrics:
        record(ctx, {M.RECOMPILES_DURING_TIMING: frames}, shape)
        ctx.check(f"no compile during timed rounds ({shape.label()})", frames == 0, detail=f"{frames} frames compiled",
                  **shape.params)
    nbytes = ceilings.decode_bytes(ms.weights, shape.batch, shape.prompt_len, shape.steps)
    for name, rb in pairs:
        per_round, sp = samples[f"{name}|{rb}"]
        extra: dict[str, Any] = {P.READBACK: rb} if shape.readback_param else {}
        ms.rounds[(name, rb)] = per_round
        ms.ms[(name, rb)] = sp.median
        record(ctx, {M.ROUND_MEDIANS_MS: [round(statistics.median(r), 5) for r in per_round]}, shape, method=name,
               **extra)
        if bandwidth_gbps and not rb:  # MBU, and its interval: the step's, over the copy bandwidth (a slower end, a lower MBU)
            ends = ({M.MBU_CI_LOW: ceilings.mbu(nbytes, sp.ci_high, bandwidth_gbps),
                     M.MBU_CI_HIGH: ceilings.mbu(nbytes, sp.ci_low, bandwidth_gbps)}
                    if sp.ci_low is not None and sp.ci_high is not None else {})
            record(ctx, {M.MBU: ceilings.mbu(nbytes, sp.median, bandwidth_gbps), **ends}, shape, method=name)
    for (name, rb), per_round in ms.rounds.items():
        eager = ms.rounds.get((Method.EAGER, rb))
        if eager is None or (name == Method.EAGER and not eager_speedup):
            continue
        extra = {P.READBACK: rb} if shape.readback_param else {}
        if M.SPEEDUP_VS_EAGER in ctx.spec.metrics:
            ctx.speedup(M.SPEEDUP_VS_EAGER, eager, per_round, **shape.params, method=name, **extra)
        if not rb and name != Method.EAGER:
            eager_ms, step_ms = ms.ms[(Method.EAGER, rb)], ms.ms[(name, rb)]
            record(ctx, {M.SAVING_MS_PER_STEP: round(eager_ms - step_ms, 5),
                         M.BREAK_EVEN_STEPS: break_even_calls(ms.setup_s(name), eager_ms, step_ms)}, shape, method=name)


def profile(ctx: Any, ms: MethodSet) -> None:
    """Kernels, GPU time, GPU-busy time and the gap of each method: after every timing of the process."""
    shape = ms.shape
    flops = ceilings.step_flops(ms.weights, shape.batch, ceilings.attended_slots(shape.prompt_len, shape.steps))
    for name, m in ms.built.items():
        m.start()
        before = dynamo_counters()
        k = stepprofile.count_kernels(m.call, ctx.device)
        frames = stepmethods.compiled_frames(before, dynamo_counters())
        if name in stepmethods.COMPILED_METHODS and M.RECOMPILES_DURING_TIMING in ctx.spec.metrics:
            ctx.check(f"{name} is not recompiled by the profiler ({shape.label()})", frames == 0,
                      detail=f"{frames} frames compiled while profiling one step", **shape.params, method=name)
        ms.kernels[name] = k["kernels"]
        record(ctx, {M.KERNELS_PER_STEP: k["kernels"], M.FLOPS_PER_KERNEL: round(flops / max(1, k["kernels"]))},
               shape, method=name)
        if k["device_us"] is not None:
            record(ctx, {M.KERNEL_TIME_PER_STEP_US: round(k["device_us"], 2)}, shape, method=name)
        if k["busy_us"] is not None:
            record(ctx, {M.GPU_BUSY_US: round(k["busy_us"], 2)}, shape, method=name)
            step = ms.ms.get((name, False))
            if step is not None:
                record(ctx, {M.GAP_US: round(step * 1e3 - k["busy_us"], 2)}, shape, method=name)
        if M.KERNELS_PER_STEP in ctx.spec.metrics:
            ctx.note(notes.TOP_KERNELS.key_for(name, _note_shape(shape)), k["top"])
            if m.path is not None and k.get("sequence") is not None:  # the hand-fused step, profiled on a GPU
                _fused_kernels(ctx, ms, name, m, k)


def _fused_kernels(ctx: Any, ms: MethodSet, name: str, m: stepmethods.StepMethod, k: dict[str, Any]) -> None:
    """The fused step kernel by kernel (lab.step.fused.breakdown): this profile's kernels matched to its plan's
    launches, with their bytes at the profiled step's position (the prompt's length: `start` prefilled it)."""
    from lab.step.fused import breakdown, traffic

    shape = ms.shape
    plan = breakdown.plan_of(m.state)
    if plan is None:
        ctx.progress(f"{name} ({shape.label()}): no fused plan bound to its state, no per-kernel table")
        return
    step = ms.ms.get((name, False))
    table = breakdown.table(name, shape.params, traffic.Shape.of(m.weights, shape.batch, m.state.max_len),
                            traffic.Layout.of_plan(plan), int(m.prompt.shape[-1]), k["sequence"],
                            None if step is None else step * 1e3, k["busy_us"], bool(plan.pdl))
    ctx.note(notes.FUSED_KERNELS.key_for(method=name, shape=_note_shape(shape)), table)


def _note_shape(shape: Shape) -> str:
    """The shape as the per-method notes name it ("b1.float32"): top_kernels, fused_kernels, fused_layouts."""
    return ".".join(f"b{v}" if k == P.BATCH else str(v) for k, v in shape.params.items())
