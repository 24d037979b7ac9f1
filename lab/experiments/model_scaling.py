"""model_scaling: does what graph capture buys shrink as the model grows?

The chapter's argument: capture removes a fixed cost per launch (the host issuing each kernel), so
its proportional gain is largest where each kernel does little arithmetic and shrinks as the
arithmetic per launch grows. Here the same fixed-shape decode step runs on GPT-2's four published
shapes (124M, 355M, 774M, 1.5B: 12-48 layers, width 768-1600), in fp32 and bf16, at batch 1 and 8,
with random weights made on the device in the target dtype (`lab.experiments.common.sweep.random_weights`: seconds,
even for the 6 GB of 1.5B in fp32). Methods are rows of lab.step.methods (default eager, graph,
compile+graph; a profile may add others, e.g. a hand-fused step, by name). For each shape: step
time, speedup and saving over eager, kernels per step, FLOPs per kernel, bytes per step and MBU
against the copy bandwidth measured in this run.

Compiles dominate the cost (about 0.5-1 s per layer cold on an H200), so they run in priority order
(batch 1 before batch 8, fp32 before bf16, small models before large) and stop at `budget_s` or
`max_compiles`: what the budget leaves out is a skipped part saying how to include it. Eager and
graph (capture in milliseconds) run everywhere. Dynamo's caches are reset between shapes (no
cudagraph trees are held here), so each shape compiles one static graph and no recompile limit is
reached.

Derived and stored: `gain_ratio` (a method's speedup at the largest size measured over its speedup
at the smallest, per dtype and batch) and the conclusion drawn by `RULE`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from lab.step import ceilings
from lab.contract import intervals
from lab.contract import metrics as M
from lab.contract import notes as N
from lab.contract.names import Method, Param as P
from lab.contract.options import option
from lab.contract.profiles import SHAPES
from lab.experiments.common.sweep import Budget, conclude, copy_bandwidth, free_device_memory, measure_methods, parameters, \
    random_weights
from lab.run.context import Context, stored_interval

Size = Literal["gpt2-124M", "gpt2-355M", "gpt2-774M", "gpt2-1.5B", "tiny-2L", "tiny-4L"]
DEFAULT_METHODS = (Method.EAGER, Method.GRAPH, Method.COMPILE_GRAPH)
RULE = ("For each non-eager method, dtype and batch with at least two sizes measured: the gain shrinks if the 95% "
        "interval of the speedup over eager at the largest size lies wholly below the interval at the smallest, grows "
        "if wholly above, holds if they overlap (unknown without intervals: fewer than two rounds). The data agree "
        "with the chapter when it shrinks in every such case for the first method that captures a graph (graph, else "
        "the first non-eager method).")


@dataclass(frozen=True)
class Options:
    sizes: tuple[Size, ...] = option(("gpt2-124M", "gpt2-355M", "gpt2-774M", "gpt2-1.5B"),
                                     "model shapes, smallest first (GPT-2's four, or the tiny smoke shapes)")
    dtypes: tuple[Literal["float32", "bfloat16"], ...] = option(("float32", "bfloat16"), "dtypes")
    batches: tuple[int, ...] = option((1, 8), "batch sizes", minimum=1)
    methods: tuple[Method, ...] = option(DEFAULT_METHODS, "step methods (lab.step.methods rows); eager is the baseline")
    steps: int = option(32, "decode steps per round", minimum=1)
    rounds: int = option(3, "rounds, methods in rotating order", minimum=1)
    budget_s: float | None = option(240.0, "no compile starts after this many seconds of the experiment (none: no cap)")
    max_compiles: int | None = option(None, "at most this many compiled methods (none: no cap)")
    traces: bool = option(True, "keep each compile's trace in the run directory (traces/model_scaling/)")


def priority(sizes: tuple[str, ...], dtypes: tuple[str, ...], batches: tuple[int, ...]) -> list[tuple[int, str, str]]:
    """(batch, dtype, size) in the order they run: what the budget keeps comes first."""
    return [(b, d, s) for b in sorted(batches) for d in dtypes for s in sizes]


def gain_trend(first: intervals.Interval | None, last: intervals.Interval | None) -> str:
    """shrinks / grows / holds / unknown: the rule's verdict on one case, from the 95% intervals of the speedup at
    the smallest and at the largest size (lab.contract.intervals: disjoint intervals differ, overlapping ones not)."""
    return {intervals.Relation.LOWER: "shrinks", intervals.Relation.HIGHER: "grows", intervals.Relation.SAME: "holds",
            intervals.Relation.UNKNOWN: "unknown"}[intervals.relation(first, last)]


def sentence(cases: list[dict]) -> str:
    """The conclusion from per-case records {method, dtype, batch, first, last, small, large, trend}."""
    if not cases:
        return "No method was measured at two sizes, so the scaling of the gain cannot be judged from this run."
    captured = [c for c in cases if c[P.METHOD] == Method.GRAPH] or [c for c in cases if c[P.METHOD] == cases[0][P.METHOD]]
    shrunk = [c for c in captured if c["trend"] == "shrinks"]
    ex = max(captured, key=lambda c: c["first"] - c["last"])
    verdict = "agree with" if len(shrunk) == len(captured) else (
        "partly agree with" if shrunk else "do not agree with")
    return (f"{ex[P.METHOD]}'s speedup over eager goes from {ex['first']:.2f}x ({ex['small']}) to {ex['last']:.2f}x "
            f"({ex['large']}) at {ex[P.DTYPE]} batch {ex[P.BATCH]}; it shrinks in {len(shrunk)} of {len(captured)} "
            f"dtype/batch cases, so the data {verdict} the chapter's prediction that the gain shrinks as the "
            f"arithmetic per launch grows.")


def run(ctx: Context[Options]) -> None:
    o, prof = ctx.options, ctx.profile
    if Method.EAGER not in o.methods:
        raise ValueError("model_scaling needs the eager method as its baseline")
    budget = Budget(o.budget_s, o.max_compiles)
    bandwidth = copy_bandwidth(ctx)
    ctx.note(N.SWEEP_CONFIG.key, {"sizes": list(o.sizes), "dtypes": list(o.dtypes), "batches": list(o.batches),
                        "methods": list(o.methods), P.STEPS: o.steps, "rounds": o.rounds, P.MAX_LEN: prof.max_len,
                        "prompt_len": prof.prompt_len, "order": "batch, then dtype, then size (compiles stop at the "
                                                                "budget)"})
    speed: dict[tuple[str, str, int], dict[str, float]] = {}  # (method, dtype, batch) -> size -> speedup
    weights_key, w = None, None
    for batch, dtype, size in priority(o.sizes, o.dtypes, o.batches):
        spec = SHAPES[size]
        if weights_key != (size, dtype):
            w = None
            free_device_memory(ctx.device)
            w = random_weights(spec, ctx.device, dtype)
            if ctx.record.find(M.WEIGHTS_MIB.name, size=size, dtype=dtype) is None:  # once: later batches rebuild
                ctx.metric(M.WEIGHTS_MIB, round(w.nbytes() / 2 ** 20, 1), size=size, dtype=dtype)
                ctx.note(N.PARAMETERS.key_for(size), parameters(spec))
            weights_key = (size, dtype)
        params = {P.SIZE: size, P.DTYPE: dtype, P.BATCH: batch}
        ctx.metric(M.BYTES_PER_STEP, ceilings.decode_bytes(w, batch, prof.prompt_len, o.steps), **params)
        ctx.metric(M.FLOPS_PER_STEP, ceilings.step_flops(w, batch, ceilings.attended_slots(prof.prompt_len, o.steps)),
                   **params)
        torch._dynamo.reset()  # a fresh static graph per shape, and no recompile limit across shapes
        w32 = w if dtype == "float32" else random_weights(spec, ctx.device, "float32")  # teacher forcing's reference
        found = measure_methods(ctx, w, tuple(o.methods), params, batch=batch, max_len=prof.max_len,
                                prompt_len=prof.prompt_len, steps=o.steps, rounds=o.rounds, warmup=prof.warmup,
                                budget=budget, bandwidth=bandwidth, w32=w32, trace=o.traces)
        w32 = None
        for method in found.ms:
            if method != Method.EAGER:  # the stored speedup and its 95% interval (None: fewer than two rounds ran)
                value = float(ctx.record.metric(M.SPEEDUP_VS_EAGER.name, method=method, **params).value)
                interval = stored_interval(ctx.record, M.SPEEDUP_VS_EAGER, method=method, **params)
                speed.setdefault((method, dtype, batch), {})[size] = value, interval
    w = None
    free_device_memory(ctx.device)
    cases = []
    for (method, dtype, batch), by_size in speed.items():
        measured = [s for s in o.sizes if s in by_size]
        if len(measured) < 2:
            continue
        (first, first_ci), (last, last_ci) = by_size[measured[0]], by_size[measured[-1]]
        ctx.metric(M.GAIN_RATIO, round(last / first, 4), method=method, dtype=dtype, batch=batch,
                   smallest=measured[0], largest=measured[-1])
        cases.append({P.METHOD: method, P.DTYPE: dtype, P.BATCH: batch, "first": first, "last": last,
                      "first_ci": None if first_ci is None else [first_ci.low, first_ci.high],
                      "last_ci": None if last_ci is None else [last_ci.low, last_ci.high],
                      "small": measured[0], "large": measured[-1], "trend": gain_trend(first_ci, last_ci)})
    ctx.note(N.TRENDS.key, cases)
    conclude(ctx, sentence(cases), RULE)
