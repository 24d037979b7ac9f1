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

import torch

from lab import stepmethods
from lab.dynamo_tools import dynamo_counters
from lab.timing import rotating_rounds

DEFAULT_METHODS = ("eager", "graph", "compile-default", "reduce-overhead", "reduce-overhead-static", "compile+graph")
BF16_METHODS = ("eager", "graph", "compile-default", "compile+graph")


def _prompt(vocab: int, batch: int, length: int, device: torch.device) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + batch)
    return torch.randint(0, vocab, (batch, length), generator=g).to(device)


def _measure_batch(ctx, w, batch: int, dtype: str, methods: tuple[str, ...], readbacks: tuple[bool, ...],
                   rounds: int, steps: int) -> dict[str, stepmethods.StepMethod]:
    prof = ctx.profile
    prompt = _prompt(prof.model.vocab_size, batch, prof.prompt_len, ctx.device)
    built: dict[str, stepmethods.StepMethod] = {}
    # No torch._dynamo.reset() between batches: each method compiles from its own function, so a
    # batch adds one cache entry per function (4 batches stay under the recompile limit), and
    # resetting would tear down cudagraph trees that earlier batches' methods still hold.
    for name in methods:
        ctx.progress(f"batch {batch} {dtype}: preparing {name}")
        try:
            m = stepmethods.build(name, w, prompt, prof.max_len, warmup=prof.warmup, dynamic=ctx.opt("dynamic", None))
        except stepmethods.FullGraphError as exc:  # the method needs one graph: FAILED with Dynamo's reason
            ctx.check(f"{name} compiles the step as one graph (batch {batch}, {dtype})", False, detail=exc.reason,
                      method=name, batch=batch, dtype=dtype)
            continue
        built[name] = m
        ctx.metric("setup_s", round(m.setup_s, 4), "s", method=name, batch=batch, dtype=dtype)
        if name in stepmethods.COMPILED_METHODS:
            ctx.metric("dynamo_graphs", m.counters["graphs"], "count", method=name, batch=batch, dtype=dtype)
            ctx.metric("graph_breaks", m.counters["graph_breaks"], "count", method=name, batch=batch, dtype=dtype)
            ctx.metric("compiled_frames", m.counters["frames"], "count", method=name, batch=batch, dtype=dtype)
            ctx.metric("cudagraph_skips", m.counters["cudagraph_skips"], "count", method=name, batch=batch, dtype=dtype)
            if m.skip_reasons:
                ctx.note(f"cudagraph_skip_reasons.{name}", sorted(set(m.skip_reasons)))
    # correctness, outside the timed path: one full decode per method, compared with eager
    for m in built.values():
        m.decode(steps, ctx.clock, readback=False)
    ref = built["eager"]
    ref_tokens = ref.tokens()
    for name, m in built.items():
        toks = m.tokens()
        end = prof.prompt_len + steps + 1
        agree = (toks[:, prof.prompt_len:end] == ref_tokens[:, prof.prompt_len:end]).float().mean().item()
        diff = (m.logits.float() - ref.logits.float()).abs().max().item() if m.logits is not None else float("nan")
        ctx.metric("token_agreement", round(agree, 6), "fraction", method=name, batch=batch, dtype=dtype)
        ctx.metric("max_logit_diff", diff, "abs", method=name, batch=batch, dtype=dtype)
        equal = agree == 1.0
        ctx.metric("tokens_equal", equal, "bool", method=name, batch=batch, dtype=dtype)
        ctx.check(f"{name} tokens equal eager's (batch {batch}, {dtype})", equal,
                  detail=f"agreement {agree:.4f}, max logit diff {diff:.3g}", fatal=(dtype == "float32"),
                  method=name, batch=batch, dtype=dtype)
    # kernels per step (profiler, one step, outside timing)
    for name, m in built.items():
        m.start()
        k = stepmethods.count_kernels(m.call, ctx.device)
        ctx.metric("kernels_per_step", k["kernels"], "count", method=name, batch=batch, dtype=dtype)
        if k["device_us"] is not None:
            ctx.metric("kernel_time_per_step_us", round(k["device_us"], 2), "us", method=name, batch=batch, dtype=dtype)
        ctx.note(f"top_kernels.{name}.b{batch}.{dtype}", k["top"])
    # steady state: rounds in rotating order over (method, readback)
    before = dynamo_counters()
    # Reading the token back each step is measured for the methods the chapter compared that way
    # (eager, graph replay, compile + graph); the other compiled methods without it, to save time.
    rb_methods = set(ctx.opt("readback_methods", ("eager", "graph", "compile+graph")))
    pairs = {(n, rb): (lambda m=m, rb=rb: m.decode(steps, ctx.clock, readback=rb))
             for n, m in built.items() for rb in readbacks if not rb or n in rb_methods}
    keyed = {f"{n}|{rb}": fn for (n, rb), fn in pairs.items()}
    samples = rotating_rounds(keyed, rounds)
    after = dynamo_counters()
    frames = stepmethods.compiled_frames(before, after)  # fullgraph compiles are not in Dynamo's frame count
    ctx.metric("recompiles_during_timing", frames, "count", batch=batch, dtype=dtype)
    ctx.check(f"no compile during timed rounds (batch {batch}, {dtype})", frames == 0, detail=f"{frames} frames compiled",
              batch=batch, dtype=dtype)
    for key, per_round in samples.items():
        name, rb = key.split("|")
        flat = [x for r in per_round for x in r]
        ctx.timing("step_ms", flat, "ms", method=name, batch=batch, dtype=dtype, readback=rb == "True")
        ctx.metric("round_medians_ms", [round(sorted(r)[len(r) // 2], 5) for r in per_round], "ms",
                   method=name, batch=batch, dtype=dtype, readback=rb == "True")
    for rb in readbacks:
        eager_ms = ctx.record.metric("step_ms", method="eager", batch=batch, dtype=dtype, readback=rb).value
        for name in built:
            if (name, rb) not in pairs:
                continue
            ms = ctx.record.metric("step_ms", method=name, batch=batch, dtype=dtype, readback=rb).value
            ctx.metric("speedup_vs_eager", round(eager_ms / ms, 4), "x", method=name, batch=batch, dtype=dtype,
                       readback=rb)
    return built


def run(ctx) -> None:
    prof = ctx.profile
    methods = tuple(ctx.opt("methods", DEFAULT_METHODS))
    if ctx.opt("max_autotune", False):
        methods = methods + ("max-autotune-no-cudagraphs",)
    else:
        ctx.skip("max-autotune-no-cudagraphs", "flag_off",
                 "max-autotune compiles for minutes on an H200 (33-166 s seen), more than the gpu profile's 8-minute "
                 "budget allows: run with --set cuda_graph_decode.max_autotune=true to include it")
    if "eager" not in methods:
        raise ValueError("cuda_graph_decode needs the eager method as its baseline")
    readbacks = tuple(bool(x) for x in ctx.opt("readback", (False, True)))
    steps = int(ctx.opt("steps", prof.decode_steps))
    rounds = int(ctx.opt("rounds", prof.rounds))
    ctx.note("config", {"prompt_len": prof.prompt_len, "steps": steps, "max_len": prof.max_len,
                        "rounds": rounds, "methods": list(methods), "readback": list(readbacks),
                        "dynamic": ctx.opt("dynamic", None),
                        "readback_methods": list(ctx.opt("readback_methods", ("eager", "graph", "compile+graph"))),
                        "batches": list(ctx.opt("batches", prof.batches))})
    _, w = ctx.gpt2("float32")
    batches = tuple(int(b) for b in ctx.opt("batches", prof.batches))
    kept = []  # every method stays alive to the end: graphs and cudagraph trees keep their memory
    for batch in batches:
        kept.append(_measure_batch(ctx, w, batch, "float32", methods, readbacks, rounds, steps))
    bf16_batches = tuple(ctx.opt("bf16_batches", (1,)))
    if bf16_batches:
        _, wb = ctx.gpt2("bfloat16")
        bf_methods = tuple(m for m in BF16_METHODS if m in methods)
        for batch in bf16_batches:
            kept.append(_measure_batch(ctx, wb, batch, "bfloat16", bf_methods, (False,), rounds, steps))
    if ctx.device.type == "cuda":
        ctx.note("tf32", {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32})
