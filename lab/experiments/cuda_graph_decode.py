"""cuda_graph_decode: one decode step run eagerly, replayed from a CUDA graph, compiled, and hand-fused.

GPT-2, a `prompt_len`-token prompt, `decode_steps` steps, a `max_len`-slot cache, for each batch:
every method (a row of lab.step.methods) gets its own state, is made ready once (compile, JIT and/or
capture time recorded as `setup_s`), then `rounds` rounds run each (method, readback) pair in
rotating order; per-step times come from CUDA events. Outside the timed path:
- correctness: in fp32 every method's greedy tokens must equal eager's (a fatal check), the largest
  logit difference is recorded; in bf16 agreement with bf16 eager is recorded, not demanded;
- teacher forcing (lab.step.teacher), at the first fp32 batch and every bf16 batch: each method fed fp32
  eager's tokens, its argmax agreement and largest logit error against fp32 eager at every step
  (free-running agreement with random weights measures divergence after near-ties, not error);
- the profiler over one step: kernels per step, their GPU time and the GPU-busy time (the union of
  their intervals); after timing, `gap_us` = the median step minus the busy time.

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
import traceback
from dataclasses import dataclass
from typing import Any

import torch

from lab.contract import metrics as M
from lab.step import methods as stepmethods, teacher
from lab.measure import stepprofile
from lab.measure.breakeven import break_even_calls
from lab.measure.dynamo_tools import dynamo_counters
from lab.contract.names import Method
from lab.contract.options import option
from lab.contract.reasons import Code
from lab.measure.timing import rotating_rounds

DEFAULT_METHODS = (Method.EAGER, Method.GRAPH, Method.COMPILE_DEFAULT, Method.REDUCE_OVERHEAD,
                   Method.REDUCE_OVERHEAD_STATIC, Method.COMPILE_GRAPH, Method.COMPILE_GRAPH_COMBO,
                   Method.COMPILE_GRAPH_PDL, Method.COMPILE_GRAPH_COORDESC, Method.FUSED, Method.FUSED_PDL,
                   Method.FUSED_PDL_PREFETCH)
BF16_METHODS = (Method.EAGER, Method.GRAPH, Method.COMPILE_DEFAULT, Method.COMPILE_GRAPH, Method.FUSED,
                Method.FUSED_PDL, Method.FUSED_PDL_PREFETCH)
MAX_AUTOTUNE_METHODS = (Method.MAX_AUTOTUNE, Method.MAX_AUTOTUNE_GRAPH)
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
    steps: int | None = option(None, "decode steps per round (default: the profile's decode_steps)")
    rounds: int | None = option(None, "rounds, methods in rotating order (default: the profile's rounds)")
    sweep_rounds: int | None = option(None, "rounds at the batches after the first (default: rounds)")
    batches: tuple[int, ...] | None = option(None, "fp32 batch sizes (default: the profile's batches)")
    bf16_batches: tuple[int, ...] = option((1,), "bf16 batch sizes (empty: no bf16 run)")
    dynamic: bool | None = option(None, "torch.compile's dynamic= (none: Dynamo's automatic dynamic shapes; false: "
                                        "one static graph per batch)")


def _prompt(vocab: int, batch: int, length: int, device: torch.device) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + batch)
    return torch.randint(0, vocab, (batch, length), generator=g).to(device)


def _build(ctx, name: str, w, prompt: torch.Tensor, batch: int, dtype: str) -> stepmethods.StepMethod | None:
    """One method made ready; a method that needs one graph and did not get it is a fatal check, any
    other failure to get ready is recorded as a skipped part with the error (eager's is not caught)."""
    prof = ctx.profile
    try:
        return stepmethods.build(name, w, prompt, prof.max_len, warmup=prof.warmup, dynamic=ctx.options.dynamic)
    except stepmethods.FullGraphError as exc:  # the method needs one graph: FAILED with Dynamo's reason
        ctx.check(f"{name} compiles the step as one graph (batch {batch}, {dtype})", False, detail=exc.reason,
                  method=name, batch=batch, dtype=dtype)
    except Exception as exc:
        if name == Method.EAGER:
            raise
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        ctx.skip(f"{name} (batch {batch}, {dtype})", Code.COMPILE_FAILED,
                 f"getting it ready raised {type(exc).__name__}: {first} (traceback in the notes)")
        ctx.note(f"build_error.{name}.b{batch}.{dtype}", traceback.format_exc()[-3000:])
    return None


def _record_setup(ctx, name: str, m: stepmethods.StepMethod, batch: int, dtype: str) -> None:
    p = {"method": name, "batch": batch, "dtype": dtype}
    ctx.metric(M.SETUP_S, round(m.setup_s, 4), **p)
    if name in stepmethods.COMPILED_METHODS:
        ctx.metric(M.DYNAMO_GRAPHS, m.counters["graphs"], **p)
        ctx.metric(M.GRAPH_BREAKS, m.counters["graph_breaks"], **p)
        ctx.metric(M.COMPILED_FRAMES, m.counters["frames"], **p)
        ctx.metric(M.CUDAGRAPH_SKIPS, m.counters["cudagraph_skips"], **p)
        if m.skip_reasons:
            ctx.note(f"cudagraph_skip_reasons.{name}", sorted(set(m.skip_reasons)))


def _correctness(ctx, built: dict[str, stepmethods.StepMethod], batch: int, dtype: str, steps: int) -> None:
    """One full decode per method, compared with eager's: tokens (fatal in fp32) and logits."""
    prof = ctx.profile
    for m in built.values():
        m.decode(steps, ctx.clock, readback=False)
    ref = built[Method.EAGER]
    ref_tokens = ref.tokens()
    end = prof.prompt_len + steps + 1
    for name, m in built.items():
        toks = m.tokens()
        agree = (toks[:, prof.prompt_len:end] == ref_tokens[:, prof.prompt_len:end]).float().mean().item()
        diff = (m.logits.float() - ref.logits.float()).abs().max().item() if m.logits is not None else float("nan")
        p = {"method": name, "batch": batch, "dtype": dtype}
        ctx.metric(M.TOKEN_AGREEMENT, round(agree, 6), **p)
        ctx.metric(M.MAX_LOGIT_DIFF, diff, **p)
        equal = agree == 1.0
        ctx.metric(M.TOKENS_EQUAL, equal, **p)
        ctx.check(f"{name} tokens equal eager's (batch {batch}, {dtype})", equal,
                  detail=f"agreement {agree:.4f}, max logit diff {diff:.3g}", fatal=(dtype == "float32"), **p)


def _teacher_forced(ctx, built: dict[str, stepmethods.StepMethod], batch: int, dtype: str, steps: int) -> None:
    """Each method fed fp32 eager's tokens; its argmax and logits against fp32 eager's at every step."""
    prof = ctx.profile
    _, w32 = ctx.gpt2("float32")
    ref = teacher.reference(w32, built[Method.EAGER].prompt, prof.max_len, steps)
    for name, m in built.items():
        if name == Method.EAGER and dtype == "float32":
            continue  # the reference itself
        r = teacher.teacher_forced(m, ref)
        p = {"method": name, "batch": batch, "dtype": dtype}
        ctx.metric(M.TEACHER_FORCED_AGREEMENT, round(r.agreement, 6), **p)
        ctx.metric(M.TEACHER_FORCED_MAX_LOGIT_ERROR, r.max_logit_error, **p)
        if r.first_disagreement is not None:
            ctx.note(f"teacher_forced_first_disagreement.{name}.b{batch}.{dtype}", r.first_disagreement)


def _kernels(ctx, built: dict[str, stepmethods.StepMethod], batch: int, dtype: str) -> dict[str, float]:
    """Kernels per step, their GPU time and the GPU-busy time, from the profiler over one step."""
    busy: dict[str, float] = {}
    for name, m in built.items():
        m.start()
        before = dynamo_counters()
        k = stepprofile.count_kernels(m.call, ctx.device)
        frames = stepmethods.compiled_frames(before, dynamo_counters())
        if name in stepmethods.COMPILED_METHODS:  # the profile must be of the compilation that is timed
            ctx.check(f"{name} is not recompiled by the profiler (batch {batch}, {dtype})", frames == 0,
                      detail=f"{frames} frames compiled while profiling one step", method=name, batch=batch,
                      dtype=dtype)
        p = {"method": name, "batch": batch, "dtype": dtype}
        ctx.metric(M.KERNELS_PER_STEP, k["kernels"], **p)
        if k["device_us"] is not None:
            ctx.metric(M.KERNEL_TIME_PER_STEP_US, round(k["device_us"], 2), **p)
        if k["busy_us"] is not None:
            busy[name] = k["busy_us"]
            ctx.metric(M.GPU_BUSY_US, round(k["busy_us"], 2), **p)
        ctx.note(f"top_kernels.{name}.b{batch}.{dtype}", k["top"])
    return busy


def _time(ctx, built: dict[str, stepmethods.StepMethod], batch: int, dtype: str, readbacks: tuple[bool, ...],
          rounds: int, steps: int, busy: dict[str, float]) -> None:
    """Rounds in rotating order over (method, readback); medians, spreads, speedups and gaps."""
    before = dynamo_counters()
    rb_methods = set(ctx.options.readback_methods)
    pairs = {(n, rb): (lambda m=m, rb=rb: m.decode(steps, ctx.clock, readback=rb))
             for n, m in built.items() for rb in readbacks if not rb or n in rb_methods}
    samples = rotating_rounds({f"{n}|{rb}": fn for (n, rb), fn in pairs.items()}, rounds)
    frames = stepmethods.compiled_frames(before, dynamo_counters())  # fullgraph compiles are not in Dynamo's frames
    ctx.metric(M.RECOMPILES_DURING_TIMING, frames, batch=batch, dtype=dtype)
    ctx.check(f"no compile during timed rounds (batch {batch}, {dtype})", frames == 0,
              detail=f"{frames} frames compiled", batch=batch, dtype=dtype)
    medians: dict[tuple[str, bool], float] = {}
    for key, per_round in samples.items():
        name, rb = key.split("|")
        p = {"method": name, "batch": batch, "dtype": dtype, "readback": rb == "True"}
        medians[(name, rb == "True")] = ctx.timing(M.STEP_MS, [x for r in per_round for x in r], **p).median
        ctx.metric(M.ROUND_MEDIANS_MS, [round(sorted(r)[len(r) // 2], 5) for r in per_round], **p)
    for (name, rb), ms in medians.items():
        if (Method.EAGER, rb) in medians:
            ctx.metric(M.SPEEDUP_VS_EAGER, round(medians[(Method.EAGER, rb)] / ms, 4), method=name, batch=batch,
                       dtype=dtype, readback=rb)
        if not rb and name in busy:
            ctx.metric(M.GAP_US, round(ms * 1e3 - busy[name], 2), method=name, batch=batch, dtype=dtype)
    if False in readbacks:
        _record_break_even(ctx, built, batch, dtype)


def _measure_batch(ctx, w, batch: int, dtype: str, methods: tuple[str, ...], readbacks: tuple[bool, ...],
                   rounds: int, steps: int, forced: bool) -> tuple[dict[str, stepmethods.StepMethod], dict[str, Any]]:
    prof = ctx.profile
    prompt = _prompt(prof.model.vocab_size, batch, prof.prompt_len, ctx.device)
    phase: dict[str, Any] = {"build_s": {}}
    built: dict[str, stepmethods.StepMethod] = {}
    # No torch._dynamo.reset() between batches: each method compiles from its own function, so a
    # batch adds one cache entry per function (4 batches stay under the recompile limit), and
    # resetting would tear down cudagraph trees that earlier batches' methods still hold.
    for name in methods:
        ctx.progress(f"batch {batch} {dtype}: preparing {name}")
        t0 = time.perf_counter()
        m = _build(ctx, name, w, prompt, batch, dtype)
        phase["build_s"][name] = round(time.perf_counter() - t0, 2)
        if m is not None:
            built[name] = m
            _record_setup(ctx, name, m, batch, dtype)
    t0 = time.perf_counter()
    _correctness(ctx, built, batch, dtype, steps)
    phase["correctness_s"] = round(time.perf_counter() - t0, 2)
    if forced:
        t0 = time.perf_counter()
        _teacher_forced(ctx, built, batch, dtype, steps)
        phase["teacher_forced_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    busy = _kernels(ctx, built, batch, dtype)
    phase["kernels_s"] = round(time.perf_counter() - t0, 2)
    ctx.progress(f"batch {batch} {dtype}: timing {len(built)} methods, {rounds} rounds")
    t0 = time.perf_counter()
    _time(ctx, built, batch, dtype, readbacks, rounds, steps, busy)
    phase["timing_s"] = round(time.perf_counter() - t0, 2)
    return built, phase


def _plan(ctx, batches: tuple[int, ...]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The methods of the first batch, the other batches and bf16; every method left out, or that this host
    or torch cannot run, listed as skipped with why."""
    opts, prof = ctx.options, ctx.profile
    methods = tuple(dict.fromkeys(opts.methods + (MAX_AUTOTUNE_METHODS if opts.max_autotune else ())))
    if Method.EAGER not in methods:
        raise ValueError("cuda_graph_decode needs the eager method as its baseline")
    for name in (n for n in stepmethods.METHODS if n not in methods):
        if name in MAX_AUTOTUNE_METHODS and not opts.max_autotune:
            ctx.skip(name, Code.PROFILE_BUDGET, f"{COSTLY[name]}, more than the {prof.name} profile's budget: the "
                                                "gpu-full profile runs it (or --set cuda_graph_decode.max_autotune=true)")
        elif name in COSTLY:
            ctx.skip(name, Code.PROFILE_BUDGET, f"{COSTLY[name]}, more than the {prof.name} profile's budget: the "
                                                f"gpu-full profile runs it (or add it to cuda_graph_decode.methods)")
        else:
            ctx.skip(name, Code.DISABLED_IN_PROFILE, f"not in cuda_graph_decode.methods of the {prof.name} profile: "
                                                     f"add it with --set cuda_graph_decode.methods=...,{name}")
    ready = []
    for name in methods:
        why = stepmethods.unavailable(stepmethods.method_spec(name), ctx.device)
        if why is None:
            ready.append(name)
        else:
            ctx.skip(name, *why)
    sweep = tuple(n for n in (methods if opts.sweep_methods is None else opts.sweep_methods) if n in ready)
    later = batches[1:]
    for label, chosen, needed in (("sweep_methods", sweep, bool(later)),
                                  ("bf16_methods", opts.bf16_methods, bool(opts.bf16_batches))):
        if needed and Method.EAGER not in chosen:
            raise ValueError(f"cuda_graph_decode.{label} must include eager: every batch is judged against it")
    for name in (n for n in ready if n not in sweep and later):
        ctx.skip(f"{name} at batch {', '.join(map(str, later))}", Code.PROFILE_BUDGET,
                 f"the {prof.name} profile times it at batch {batches[0]} only (cuda_graph_decode.sweep_methods): the "
                 "gpu-full profile times every method at every batch")
    bf16 = tuple(n for n in opts.bf16_methods if n in ready)
    if opts.bf16_batches:
        for name in (n for n in ready if n not in bf16):
            ctx.skip(f"{name} bfloat16", Code.DISABLED_IN_PROFILE,
                     f"the {prof.name} profile runs it in fp32 only (add it to cuda_graph_decode.bf16_methods)")
    return tuple(ready), sweep, bf16


def _record_break_even(ctx, built: dict[str, stepmethods.StepMethod], batch: int, dtype: str) -> None:
    """Per method: the step time it saves over eager (no readback) and the steps its setup takes to pay (stored
    once here, so every table and chart shows the same figure; null: it saves nothing, it never pays)."""
    eager_ms = ctx.record.metric(M.STEP_MS.name, method=Method.EAGER, batch=batch, dtype=dtype, readback=False).value
    shared = {}
    for name, m in built.items():
        if name == Method.EAGER:
            continue
        ms = ctx.record.metric(M.STEP_MS.name, method=name, batch=batch, dtype=dtype, readback=False).value
        setup_s = ctx.record.metric(M.SETUP_S.name, method=name, batch=batch, dtype=dtype).value
        if m.compiled_by is not None and m.compiled_by in built:  # it reused that method's compile: pay for it too
            setup_s += ctx.record.metric(M.SETUP_S.name, method=m.compiled_by, batch=batch, dtype=dtype).value
            shared[name] = m.compiled_by
        ctx.metric(M.SAVING_MS_PER_STEP, round(eager_ms - ms, 5), method=name, batch=batch, dtype=dtype)
        ctx.metric(M.BREAK_EVEN_STEPS, break_even_calls(max(setup_s, 0.0), eager_ms, ms), method=name, batch=batch,
                   dtype=dtype)
    if shared:
        ctx.note(f"break_even_includes.b{batch}.{dtype}", {n: f"{by}'s compile (its setup_s reused that compilation)"
                                                           for n, by in shared.items()})


def run(ctx) -> None:
    prof, opts = ctx.profile, ctx.options
    steps = prof.decode_steps if opts.steps is None else opts.steps
    rounds = prof.rounds if opts.rounds is None else opts.rounds
    sweep_rounds = rounds if opts.sweep_rounds is None else opts.sweep_rounds
    batches = tuple(prof.batches if opts.batches is None else opts.batches)
    first, sweep, bf16 = _plan(ctx, batches)
    ctx.note("config", {"prompt_len": prof.prompt_len, "steps": steps, "max_len": prof.max_len,
                        "rounds": rounds, "sweep_rounds": sweep_rounds, "methods": list(first),
                        "sweep_methods": list(sweep), "bf16_methods": list(bf16), "readback": list(opts.readback),
                        "dynamic": opts.dynamic, "readback_methods": list(opts.readback_methods),
                        "readback_batches": None if opts.readback_batches is None else list(opts.readback_batches),
                        "batches": list(batches), "bf16_batches": list(opts.bf16_batches)})
    ctx.note("token_agreement", M.FREE_RUNNING_NOTE)
    _, w = ctx.gpt2("float32")
    kept = []  # every method stays alive to the end: graphs and cudagraph trees keep their memory
    phases: dict[str, Any] = {}
    start = time.perf_counter()
    for i, batch in enumerate(batches):
        rb = tuple(r for r in opts.readback if not r or opts.readback_batches is None or batch in opts.readback_batches)
        built, phases[f"b{batch}.float32"] = _measure_batch(ctx, w, batch, "float32", first if i == 0 else sweep, rb,
                                                            rounds if i == 0 else sweep_rounds, steps, forced=i == 0)
        kept.append(built)
    if opts.bf16_batches and bf16:
        _, wb = ctx.gpt2("bfloat16")
        for batch in opts.bf16_batches:
            built, phases[f"b{batch}.bfloat16"] = _measure_batch(ctx, wb, batch, "bfloat16", bf16, (False,), rounds,
                                                                 steps, forced=True)
            kept.append(built)
    phases["total_s"] = round(time.perf_counter() - start, 2)
    ctx.note("phase_s", phases)
    if ctx.device.type == "cuda":
        ctx.note("tf32", {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32})
