"""cuda_graph_decode: one decode step run eagerly, replayed from a CUDA graph, and compiled in each mode.

GPT-2, a `prompt_len`-token prompt, `decode_steps` steps, a `max_len`-slot cache, for each batch:
every method gets its own state, is made ready once (compile/capture time recorded as `setup_s`),
then `rounds` rounds run each (method, readback) pair in rotating order; per-step times come from
CUDA events. Correctness is checked outside the timed path: in fp32 every method's greedy tokens
must equal eager's (a fatal check), and the largest logit difference is recorded. A bf16 run at
batch 1 reports agreement and logit differences instead of demanding equality.

`reduce-overhead` on this step skips CUDA graphs because the step mutates its inputs (the state
tensors); that skip and its reason are recorded as data. `reduce-overhead-static` gives the state
(and weights) static addresses, as a module's buffers have, which lets cudagraph trees capture it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lab import metrics as M
from lab import stepmethods
from lab.costs import break_even_calls
from lab.dynamo_tools import dynamo_counters
from lab.names import Method
from lab.options import option
from lab.reasons import Code
from lab.timing import rotating_rounds

DEFAULT_METHODS = (Method.EAGER, Method.GRAPH, Method.COMPILE_DEFAULT, Method.REDUCE_OVERHEAD,
                   Method.REDUCE_OVERHEAD_STATIC, Method.COMPILE_GRAPH)
BF16_METHODS = (Method.EAGER, Method.GRAPH, Method.COMPILE_DEFAULT, Method.COMPILE_GRAPH)
# Reading the token back each step is measured for the methods the chapter compared that way
# (eager, graph replay, compile + graph); the other compiled methods without it, to save time.
READBACK_METHODS = (Method.EAGER, Method.GRAPH, Method.COMPILE_GRAPH)


@dataclass(frozen=True)
class Options:
    methods: tuple[Method, ...] = option(DEFAULT_METHODS, "the step methods compared; eager is the baseline and "
                                         "must be one of them")
    max_autotune: bool = option(False, "also compile with max-autotune-no-cudagraphs (minutes of autotuning)")
    readback: tuple[bool, ...] = option((False, True), "time without (false) and/or with (true) reading the "
                                        "token back to the host every step")
    readback_methods: tuple[Method, ...] = option(READBACK_METHODS, "the methods also timed with the token read back")
    steps: int | None = option(None, "decode steps per round (default: the profile's decode_steps)")
    rounds: int | None = option(None, "rounds, methods in rotating order (default: the profile's rounds)")
    batches: tuple[int, ...] | None = option(None, "fp32 batch sizes (default: the profile's batches)")
    bf16_batches: tuple[int, ...] = option((1,), "bf16 batch sizes (empty: no bf16 run)")
    dynamic: bool | None = option(None, "torch.compile's dynamic= (none: Dynamo's automatic dynamic shapes)")


def _prompt(vocab: int, batch: int, length: int, device: torch.device) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + batch)
    return torch.randint(0, vocab, (batch, length), generator=g).to(device)


def _measure_batch(ctx, w, batch: int, dtype: str, methods: tuple[str, ...], readbacks: tuple[bool, ...],
                   rounds: int, steps: int) -> dict[str, stepmethods.StepMethod]:
    opts = ctx.options
    prof = ctx.profile
    prompt = _prompt(prof.model.vocab_size, batch, prof.prompt_len, ctx.device)
    built: dict[str, stepmethods.StepMethod] = {}
    # No torch._dynamo.reset() between batches: each method compiles from its own function, so a
    # batch adds one cache entry per function (4 batches stay under the recompile limit), and
    # resetting would tear down cudagraph trees that earlier batches' methods still hold.
    for name in methods:
        try:  # a compile or capture shows "compiling NAME (batch, dtype, first call)" (stepmethods.build)
            m = stepmethods.build(name, w, prompt, prof.max_len, warmup=prof.warmup, dynamic=opts.dynamic)
        except stepmethods.FullGraphError as exc:  # the method needs one graph: FAILED with Dynamo's reason
            ctx.check(f"{name} compiles the step as one graph (batch {batch}, {dtype})", False, detail=exc.reason,
                      method=name, batch=batch, dtype=dtype)
            continue
        built[name] = m
        ctx.metric(M.SETUP_S, round(m.setup_s, 4), method=name, batch=batch, dtype=dtype)
        if name in stepmethods.COMPILED_METHODS:
            ctx.metric(M.DYNAMO_GRAPHS, m.counters["graphs"], method=name, batch=batch, dtype=dtype)
            ctx.metric(M.GRAPH_BREAKS, m.counters["graph_breaks"], method=name, batch=batch, dtype=dtype)
            ctx.metric(M.COMPILED_FRAMES, m.counters["frames"], method=name, batch=batch, dtype=dtype)
            ctx.metric(M.CUDAGRAPH_SKIPS, m.counters["cudagraph_skips"], method=name, batch=batch, dtype=dtype)
            if m.skip_reasons:
                ctx.note(f"cudagraph_skip_reasons.{name}", sorted(set(m.skip_reasons)))
    # correctness, outside the timed path: one full decode per method, compared with eager
    for m in built.values():
        m.decode(steps, ctx.clock, readback=False)
    ref = built[Method.EAGER]
    ref_tokens = ref.tokens()
    for name, m in built.items():
        toks = m.tokens()
        end = prof.prompt_len + steps + 1
        agree = (toks[:, prof.prompt_len:end] == ref_tokens[:, prof.prompt_len:end]).float().mean().item()
        diff = (m.logits.float() - ref.logits.float()).abs().max().item() if m.logits is not None else float("nan")
        ctx.metric(M.TOKEN_AGREEMENT, round(agree, 6), method=name, batch=batch, dtype=dtype)
        ctx.metric(M.MAX_LOGIT_DIFF, diff, method=name, batch=batch, dtype=dtype)
        equal = agree == 1.0
        ctx.metric(M.TOKENS_EQUAL, equal, method=name, batch=batch, dtype=dtype)
        ctx.check(f"{name} tokens equal eager's (batch {batch}, {dtype})", equal,
                  detail=f"agreement {agree:.4f}, max logit diff {diff:.3g}", fatal=(dtype == "float32"),
                  method=name, batch=batch, dtype=dtype)
    # kernels per step (profiler, one step, outside timing)
    for name, m in built.items():
        m.start()
        k = stepmethods.count_kernels(m.call, ctx.device)
        ctx.metric(M.KERNELS_PER_STEP, k["kernels"], method=name, batch=batch, dtype=dtype)
        if k["device_us"] is not None:
            ctx.metric(M.KERNEL_TIME_PER_STEP_US, round(k["device_us"], 2), method=name, batch=batch, dtype=dtype)
        ctx.note(f"top_kernels.{name}.b{batch}.{dtype}", k["top"])
    # steady state: rounds in rotating order over (method, readback)
    before = dynamo_counters()
    rb_methods = set(opts.readback_methods)
    pairs = {(n, rb): (lambda m=m, rb=rb: m.decode(steps, ctx.clock, readback=rb))
             for n, m in built.items() for rb in readbacks if not rb or n in rb_methods}
    keyed = {f"{n}|{rb}": fn for (n, rb), fn in pairs.items()}
    ctx.progress(f"batch {batch} {dtype}: timing {len(keyed)} methods, {rounds} rounds of {steps} steps")
    samples = rotating_rounds(keyed, rounds)
    after = dynamo_counters()
    frames = stepmethods.compiled_frames(before, after)  # fullgraph compiles are not in Dynamo's frame count
    ctx.metric(M.RECOMPILES_DURING_TIMING, frames, batch=batch, dtype=dtype)
    ctx.check(f"no compile during timed rounds (batch {batch}, {dtype})", frames == 0, detail=f"{frames} frames compiled",
              batch=batch, dtype=dtype)
    for key, per_round in samples.items():
        name, rb = key.split("|")
        flat = [x for r in per_round for x in r]
        ctx.timing(M.STEP_MS, flat, method=name, batch=batch, dtype=dtype, readback=rb == "True")
        ctx.metric(M.ROUND_MEDIANS_MS, [round(sorted(r)[len(r) // 2], 5) for r in per_round],
                   method=name, batch=batch, dtype=dtype, readback=rb == "True")
    for rb in readbacks:
        eager_ms = ctx.record.metric(M.STEP_MS.name, method=Method.EAGER, batch=batch, dtype=dtype, readback=rb).value
        for name in built:
            if (name, rb) not in pairs:
                continue
            ms = ctx.record.metric(M.STEP_MS.name, method=name, batch=batch, dtype=dtype, readback=rb).value
            ctx.metric(M.SPEEDUP_VS_EAGER, round(eager_ms / ms, 4), method=name, batch=batch, dtype=dtype,
                       readback=rb)
    if False in readbacks:
        _record_break_even(ctx, built, batch, dtype)
    return built


def _record_break_even(ctx, built: dict[str, stepmethods.StepMethod], batch: int, dtype: str) -> None:
    """Per method: the step time it saves over eager (no readback) and the steps its setup takes to pay (stored
    once here, so every table and chart shows the same figure; null: it saves nothing, it never pays)."""
    eager_ms = ctx.record.metric(M.STEP_MS.name, method=Method.EAGER, batch=batch, dtype=dtype, readback=False).value
    for name in built:
        if name == Method.EAGER:
            continue
        ms = ctx.record.metric(M.STEP_MS.name, method=name, batch=batch, dtype=dtype, readback=False).value
        setup_s = ctx.record.metric(M.SETUP_S.name, method=name, batch=batch, dtype=dtype).value
        ctx.metric(M.SAVING_MS_PER_STEP, round(eager_ms - ms, 5), method=name, batch=batch, dtype=dtype)
        ctx.metric(M.BREAK_EVEN_STEPS, break_even_calls(max(setup_s, 0.0), eager_ms, ms), method=name, batch=batch,
                   dtype=dtype)


def run(ctx) -> None:
    prof, opts = ctx.profile, ctx.options
    methods = opts.methods
    if opts.max_autotune:
        methods = methods + (Method.MAX_AUTOTUNE,)
    else:
        ctx.skip(Method.MAX_AUTOTUNE, Code.FLAG_OFF,
                 "max-autotune compiles for minutes on an H200 (33-166 s seen), more than the gpu profile's 8-minute "
                 "budget allows: run with --set cuda_graph_decode.max_autotune=true to include it")
    if Method.EAGER not in methods:
        raise ValueError("cuda_graph_decode needs the eager method as its baseline")
    readbacks = opts.readback
    steps = prof.decode_steps if opts.steps is None else opts.steps
    rounds = prof.rounds if opts.rounds is None else opts.rounds
    batches = prof.batches if opts.batches is None else opts.batches
    ctx.note("config", {"prompt_len": prof.prompt_len, "steps": steps, "max_len": prof.max_len,
                        "rounds": rounds, "methods": list(methods), "readback": list(readbacks),
                        "dynamic": opts.dynamic, "readback_methods": list(opts.readback_methods),
                        "batches": list(batches)})
    _, w = ctx.gpt2("float32")
    kept = []  # every method stays alive to the end: graphs and cudagraph trees keep their memory
    for batch in batches:
        kept.append(_measure_batch(ctx, w, batch, "float32", methods, readbacks, rounds, steps))
    if opts.bf16_batches:
        _, wb = ctx.gpt2("bfloat16")
        bf_methods = tuple(m for m in BF16_METHODS if m in methods)
        for batch in opts.bf16_batches:
            kept.append(_measure_batch(ctx, wb, batch, "bfloat16", bf_methods, (False,), rounds, steps))
    if ctx.device.type == "cuda":
        ctx.note("tf32", {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32})
