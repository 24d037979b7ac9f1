"""cuda_graph_decode: one decode step run eagerly, replayed from a CUDA graph, compiled, and hand-fused.

GPT-2, a `prompt_len`-token prompt, `decode_steps` steps, a `max_len`-slot cache, for each batch:
every method (a row of lab.step.methods) gets its own state, is made ready once (compile, JIT and/or
capture time recorded as `setup_s`), then `rounds` rounds run each (method, readback) pair in
rotating order; per-step times come from CUDA events. The measurement is the lab's one way of
measuring step methods (lab.experiments.common.methods): build, check, time, and profile last.
- correctness, outside the timed path (lab.step.correctness): in fp32 graph replay must give eager's
  tokens exactly (fatal); every other method is judged by teacher forcing against fp32 eager (its
  argmax agreement and largest logit error within bf16 eager's own, or the fp32 allowance), recorded
  as `correct`; free-running agreement is data (it measures divergence after near-ties, not error);
- timing: each step's median with its 95% interval, each speedup over eager with its interval (a
  bootstrap over rounds, rounds paired), MBU from each method's own step time;
- the profiler over one step, after every batch's timing: kernels per step, their GPU time and the
  GPU-busy time (the union of their intervals); `gap_us` = the median step minus the busy time.

Which methods run where is the profile's choice: `methods` at the first batch, `sweep_methods` at
the others, `bf16_methods` in bf16; a method left out is listed as skipped with the reason (and the
profile that runs it), a method this host or torch cannot run as skipped with why. `phase_s` notes
where the experiment's own time went (building, checking, profiling, timing), per batch.

`reduce-overhead` on this step skips CUDA graphs because the step mutates its inputs (the state
tensors); that skip and its reason are recorded as data. `reduce-overhead-static` gives the state
(and weights) static addresses, as a module's buffers have, which lets cudagraph trees capture it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from lab.contract import metrics as M
from lab.contract import notes as N
from lab.contract.names import Experiment, Method, Param as P
from lab.contract.options import option
from lab.contract.reasons import Code
from lab.experiments.common import methods
from lab.experiments.common.sweep import copy_bandwidth
from lab.measure import profiler_guard
from lab.step import methods as stepmethods
from lab.run.context import Context

DEFAULT_METHODS = (Method.EAGER, Method.GRAPH, Method.COMPILE_DEFAULT, Method.REDUCE_OVERHEAD,
                   Method.REDUCE_OVERHEAD_STATIC, Method.COMPILE_GRAPH, Method.COMPILE_GRAPH_COMBO,
                   Method.COMPILE_GRAPH_PDL, Method.COMPILE_GRAPH_COORDESC, Method.FUSED, Method.FUSED_PDL,
                   Method.FUSED_PDL_PREFETCH)
BF16_METHODS = (Method.EAGER, Method.GRAPH, Method.COMPILE_DEFAULT, Method.COMPILE_GRAPH, Method.FUSED,
                Method.FUSED_PDL, Method.FUSED_PDL_PREFETCH)
MAX_AUTOTUNE_METHODS = (Method.MAX_AUTOTUNE, Method.MAX_AUTOTUNE_GRAPH)
# The tuned compiles: minutes of compiling each; gpu-full measures them at every batch in compile_tuning, which
# runs this experiment's measurement on them alone (lab.experiments.compile_tuning)
TUNED_METHODS = (Method.COMPILE_GRAPH_COORDESC, *MAX_AUTOTUNE_METHODS)
TUNING_EXPERIMENT = Experiment.COMPILE_TUNING
# Reading the token back each step is measured for the methods the chapter compared that way
# (eager, graph replay, compile + graph); the other methods without it, to save time.
READBACK_METHODS = (Method.EAGER, Method.GRAPH, Method.COMPILE_GRAPH)
# What makes a method too slow to get ready for the gpu profile's budget (it is then skipped with
# profile_budget, and gpu-full runs it).
COSTLY = {
    Method.MAX_AUTOTUNE: "max-autotune benchmarks Triton templates against cuBLAS for every matmul while compiling "
                         "(33-166 s seen on an H200)",
    Method.MAX_AUTOTUNE_GRAPH: "max-autotune benchmarks Triton templates against cuBLAS for every matmul while "
                               "compiling (33-166 s seen on an H200)",
    Method.COMPILE_GRAPH_COORDESC: "coordinate-descent tuning compiles and times neighbouring configs of every "
                                   "generated kernel while compiling (minutes for the 124M step)",
}


@dataclass(frozen=True)
class Options:
    methods: tuple[Method, ...] = option(DEFAULT_METHODS, "the step methods compared at the first batch; eager is "
                                         "the baseline and must be one of them")
    max_autotune: bool = option(False, "also compile with max-autotune-no-cudagraphs, plain and captured (minutes "
                                       "of autotuning)")
    sweep_methods: tuple[Method, ...] | None = option(None, "the methods at the batches after the first (none: the "
                                                            "same as methods)")
    bf16_methods: tuple[Method, ...] = option(BF16_METHODS, "the methods of the bf16 run (those also in methods)")
    readback: tuple[bool, ...] = option((False, True), "time without (false) and/or with (true) reading the "
                                        "token back to the host every step")
    readback_methods: tuple[Method, ...] = option(READBACK_METHODS, "the methods also timed with the token read back")
    readback_batches: tuple[int, ...] | None = option(None, "the batches timed with the token read back (none: all)")
    steps: int | None = option(None, "decode steps per round (default: the profile's decode_steps)",
                               profile="decode_steps", minimum=1)
    rounds: int | None = option(None, "rounds, methods in rotating order (default: the profile's rounds)",
                                profile="rounds", minimum=1)
    sweep_rounds: int | None = option(None, "rounds at the batches after the first (default: rounds)",
                                      same_as="rounds", minimum=1)
    batches: tuple[int, ...] | None = option(None, "fp32 batch sizes (default: the profile's batches)",
                                             profile="batches", minimum=1)
    bf16_batches: tuple[int, ...] = option((1,), "bf16 batch sizes (empty: no bf16 run)", minimum=1)
    dynamic: bool | None = option(None, "torch.compile's dynamic= (none: Dynamo's automatic dynamic shapes; false: "
                                        "one static graph per batch)")

    # The methods this experiment answers for: every one left out of its lists is recorded as skipped, with why
    # (None: every step method; lab.experiments.compile_tuning narrows it to the tuned compiles and their baselines)
    SCOPE: ClassVar[tuple[str, ...] | None] = None


def _prompt(vocab: int, batch: int, length: int, device: torch.device) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + batch)
    return torch.randint(0, vocab, (batch, length), generator=g).to(device)


def _measure(ctx: Context[Options], w, w32, shape: methods.Shape, names: tuple[str, ...], readbacks: tuple[bool, ...], rounds: int,
             forced: bool, bandwidth: float) -> tuple[methods.MethodSet, dict[str, Any]]:
    """Build, check and time the methods of one batch and dtype (their profile comes after every batch's timing)."""
    prof = ctx.profile
    prompt = _prompt(prof.model.vocab_size, shape.batch, prof.prompt_len, ctx.device)
    phase: dict[str, Any] = {}
    t0 = time.perf_counter()
    # No torch._dynamo.reset() between batches: each method compiles from its own function, so a
    # batch adds one cache entry per function (4 batches stay under the recompile limit), and
    # resetting would tear down cudagraph trees that earlier batches' methods still hold.
    ms = methods.build(ctx, w, names, prompt, shape, warmup=prof.warmup, dynamic=ctx.options.dynamic)
    phase["build_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    methods.check(ctx, ms, w32=w32, forced=forced, record_reference=True)
    phase["correctness_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    methods.time(ctx, ms, rounds, readbacks, readback_methods=tuple(ctx.options.readback_methods),
                 bandwidth_gbps=bandwidth, eager_speedup=True)
    phase["timing_s"] = round(time.perf_counter() - t0, 2)
    shared = {n: f"{m.compiled_by}'s compile (its setup_s reused that compilation)" for n, m in ms.built.items()
              if m.compiled_by in ms.built and False in readbacks}  # its break_even_steps pays for that one too
    if shared:
        ctx.note(N.BREAK_EVEN_INCLUDES.key_for(batch=shape.batch, dtype=shape.dtype), shared)
    return ms, phase


def _in_tuning(ctx: Context[Options], name: str) -> bool:
    """Whether this run times `name` at every batch in compile_tuning (a tuned compile, where the profile runs it)."""
    return (ctx.spec.id != TUNING_EXPERIMENT and name in TUNED_METHODS
            and TUNING_EXPERIMENT in (ctx.profile.experiments or ()))


def _elsewhere(ctx: Context[Options], name: str) -> str | None:
    """Where this run measures `name` instead, at every batch (compile_tuning, where the profile runs it), or None."""
    if _in_tuning(ctx, name):
        return (f"{COSTLY[name]}: this run measures it in {TUNING_EXPERIMENT}, at every batch beside compile+graph (a "
                f"command of its own on a host that stops one after 10 minutes)")
    return None


def _later_batches(ctx: Context[Options], name: str) -> str:
    """Where a method timed at the first batch only is timed at the others, or how to have it timed there."""
    if _in_tuning(ctx, name):
        return f"this run times it at every batch in {TUNING_EXPERIMENT}"
    if ctx.profile.name != "gpu-full":
        return "the gpu-full profile times every method at every batch"
    return f"add it to {ctx.spec.id}.sweep_methods to time it at every batch"


def _plan(ctx: Context[Options], batches: tuple[int, ...]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The methods of the first batch, the other batches and bf16; every method of the experiment's scope left out,
    or that this host or torch cannot run, listed as skipped with why."""
    opts, prof, eid = ctx.options, ctx.profile, ctx.spec.id
    scope = type(opts).SCOPE
    methods = tuple(dict.fromkeys(opts.methods + (MAX_AUTOTUNE_METHODS if opts.max_autotune else ())))
    if Method.EAGER not in methods:
        raise ValueError(f"{eid} needs the eager method as its baseline")
    for name in (n for n in stepmethods.METHODS if n not in methods and (scope is None or n in scope)):
        elsewhere = _elsewhere(ctx, name)
        if elsewhere is not None:
            ctx.skip(name, Code.PROFILE_BUDGET, elsewhere)
        elif name in MAX_AUTOTUNE_METHODS and not opts.max_autotune:
            ctx.skip(name, Code.PROFILE_BUDGET, f"{COSTLY[name]}, more than the {prof.name} profile's budget: the "
                                                f"gpu-full profile measures it (or --set {eid}.max_autotune=true)")
        elif name in COSTLY:
            ctx.skip(name, Code.PROFILE_BUDGET, f"{COSTLY[name]}, more than the {prof.name} profile's budget: the "
                                                f"gpu-full profile measures it (or add it to {eid}.methods)")
        else:
            ctx.skip(name, Code.DISABLED_IN_PROFILE, f"not in {eid}.methods of the {prof.name} profile: "
                                                     f"add it with --set {eid}.methods=...,{name}")
    why_not = {name: stepmethods.unavailable(stepmethods.method_spec(name), ctx.device) for name in methods}
    for name, why in why_not.items():
        if why is not None:
            ctx.skip(name, *why)
    ready = [name for name, why in why_not.items() if why is None]
    sweep = tuple(n for n in (methods if opts.sweep_methods is None else opts.sweep_methods) if n in ready)
    later = batches[1:]
    for label, chosen, needed in (("sweep_methods", sweep, bool(later)),
                                  ("bf16_methods", opts.bf16_methods, bool(opts.bf16_batches))):
        if needed and Method.EAGER not in chosen:
            raise ValueError(f"{eid}.{label} must include eager: every batch is judged against it")
    for name in (n for n in ready if n not in sweep and later):
        ctx.skip(f"{name} at batch {', '.join(map(str, later))}", Code.PROFILE_BUDGET,
                 f"the {prof.name} profile times it at batch {batches[0]} only ({eid}.sweep_methods): "
                 f"{_later_batches(ctx, name)}")
    bf16 = tuple(n for n in opts.bf16_methods if n in ready)
    if opts.bf16_batches:
        for name in (n for n in ready if n not in bf16):
            ctx.skip(f"{name} bfloat16", Code.DISABLED_IN_PROFILE,
                     f"the {prof.name} profile runs it in fp32 only (add it to {eid}.bf16_methods)")
    return tuple(ready), sweep, bf16


def run(ctx: Context[Options]) -> None:
    prof, opts = ctx.profile, ctx.options
    steps, rounds, sweep_rounds, batches = opts.steps, opts.rounds, opts.sweep_rounds, opts.batches
    first, sweep, bf16 = _plan(ctx, batches)
    ctx.note(N.DECODE_CONFIG.key, {"prompt_len": prof.prompt_len, P.STEPS: steps, P.MAX_LEN: prof.max_len,
                        "rounds": rounds, "sweep_rounds": sweep_rounds, "methods": list(first),
                        "sweep_methods": list(sweep), "bf16_methods": list(bf16), P.READBACK: list(opts.readback),
                        P.DYNAMIC: opts.dynamic, "readback_methods": list(opts.readback_methods),
                        "readback_batches": None if opts.readback_batches is None else list(opts.readback_batches),
                        "batches": list(batches), "bf16_batches": list(opts.bf16_batches)})
    ctx.note(N.TOKEN_AGREEMENT.key, M.FREE_RUNNING_NOTE)
    bandwidth = copy_bandwidth(ctx)  # timed before any profile of this process
    _, w = ctx.gpt2("float32")
    sets: list[methods.MethodSet] = []  # every method stays alive to the end: graphs and trees keep their memory
    phases: dict[str, Any] = {}
    start = time.perf_counter()

    def shape(batch: int, dtype: str) -> methods.Shape:
        return methods.Shape(batch, dtype, prof.prompt_len, steps, prof.max_len, {P.BATCH: batch, P.DTYPE: dtype},
                             readback_param=True)

    for i, batch in enumerate(batches):
        rb = tuple(r for r in opts.readback if not r or opts.readback_batches is None or batch in opts.readback_batches)
        ms, phases[f"b{batch}.float32"] = _measure(ctx, w, w, shape(batch, "float32"), first if i == 0 else sweep, rb,
                                                   rounds if i == 0 else sweep_rounds, forced=i == 0,
                                                   bandwidth=bandwidth)
        sets.append(ms)
    if opts.bf16_batches and bf16:
        _, wb = ctx.gpt2("bfloat16")
        for batch in opts.bf16_batches:
            ms, phases[f"b{batch}.bfloat16"] = _measure(ctx, wb, w, shape(batch, "bfloat16"), bf16, (False,), rounds,
                                                        forced=True, bandwidth=bandwidth)
            sets.append(ms)
    # The profiles come last, after every timing of this experiment: a profiler session may leave CUPTI
    # attached and slow every later eager launch (lab.measure.profiler_guard).
    for ms in sets:
        ctx.progress(f"{ms.shape.label()}: profiling {len(ms.built)} methods (after all timing)")
        t0 = time.perf_counter()
        methods.profile(ctx, ms)
        phases[f"b{ms.shape.batch}.{ms.shape.dtype}"]["kernels_s"] = round(time.perf_counter() - t0, 2)
    phases["total_s"] = round(time.perf_counter() - start, 2)
    ctx.note(N.PHASE_S.key, phases)
    ctx.note(N.PROFILER_GUARD.key, profiler_guard.state())  # sessions, and whether CUPTI was torn down after them
    if ctx.device.type == "cuda":
        ctx.note(N.TF32.key, {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32})
