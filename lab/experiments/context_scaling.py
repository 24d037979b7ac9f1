"""context_scaling: when does attending the whole buffer stop being free?

The fixed-shape step attends all `max_len` slots at every position (unreached ones masked), which
is what lets one graph serve every step; a growing-cache step attends only the slots filled so far,
but its shapes change every step (no graph: eager, or compiled with dynamic shapes). At a short
cache the fixed step with graph replay wins by removing launch overhead; as the cache grows it
reads ever more slots it does not need. For max_len 256, 512, 1024, 2048 (past the model's 1024
positions, the position table is extended with seeded rows: `extend_positions`, a config with
n_positions 2048), batch 1 and 16, the cache filled to 10%, 50% and 90% (the prompt is that long):
per-step time of the fixed step (graph replay by default), the growing step eager and compiled
(`dynamic=True`: one graph per batch for every length; compile time recorded once per batch).

Derived and stored: `crossover_max_len` per batch and fill, the cache length at which the fixed
step stops beating the best growing step, interpolated on log2(length) between the two measured
lengths where the ratio fixed / best growing crosses 1 (null with a note when it never crosses, or
when it is already at or above 1 at the shortest length); the conclusion follows `RULE`.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass, replace
from typing import Any, Callable, Literal

import torch

from lab.measure import compiletrace
from lab.step import decode, methods as stepmethods
from lab.contract import metrics as M
from lab.step.model import Weights
from lab.contract import notes as N
from lab.contract.names import Method, Param as P
from lab.contract.options import option
from lab.contract.reasons import Code
from lab.experiments.common.sweep import conclude, free_device_memory, inductor_skip, needs_cuda, prompt_for
from lab.measure.timing import first_call, flat, rotating_rounds, time_calls
from lab.run.context import Context

Growing = Literal["eager", "compile"]
RULE = ("Per batch, at the headline fill: the crossover is the cache length where fixed-step time / best growing-step "
        "time first reaches 1, interpolated on log2(length) between measured lengths; 'beats it at every length' "
        "when the ratio stays below 1, 'never beats it' when it is at or above 1 at the shortest length.")


@dataclass(frozen=True)
class Options:
    max_lens: tuple[int, ...] = option((256, 512, 1024, 2048), "cache lengths (slots), shortest first; past the "
                                                               "model's positions the position table is extended",
                                                   minimum=1)
    batches: tuple[int, ...] = option((1, 16), "batch sizes", minimum=1)
    fills: tuple[float, ...] = option((0.1, 0.5, 0.9), "how full the cache is when timing starts (prompt length / "
                                                       "max_len)", maximum=1)
    headline_fill: float = option(0.5, "the fill the conclusion speaks of (the average over a sequence's life)",
                                  maximum=1)
    fixed_method: Method = option(Method.GRAPH, "how the fixed-shape step runs (graph: manual capture)")
    growing: tuple[Growing, ...] = option(("eager", "compile"), "how the growing-cache step runs")
    steps: int = option(32, "decode steps per round (fewer where the cache has less room)", minimum=1)
    rounds: int = option(3, "rounds, variants in rotating order", minimum=1)
    traces: bool = option(True, "keep the dynamic compile's trace in the run directory")


def extend_positions(w: Weights, n: int, seed: int = 2048) -> Weights:
    """The same weights with a position table of `n` rows: the first rows unchanged, new ones seeded random
    at the table's own scale (as a config with n_positions = n would have them)."""
    have = int(w.wpe.shape[0])
    if n <= have:
        return w
    g = torch.Generator(device=w.device).manual_seed(seed)
    extra = torch.randn(n - have, w.n_embd, generator=g, device=w.device) * float(w.wpe.float().std())
    return replace(w, wpe=torch.cat([w.wpe, extra.to(w.dtype)]))


def crossover(lengths: list[int], ratios: list[float]) -> tuple[float | None, str]:
    """(crossover length or None, what happened) where fixed / best-growing time first reaches 1, on log2(length).
    What happened: "crosses", "always" (the fixed step wins at every length) or "never" (it loses at the shortest)."""
    if not lengths:
        return None, "unmeasured"
    if ratios[0] >= 1:
        return None, "never"
    for (l0, r0), (l1, r1) in zip(zip(lengths, ratios), zip(lengths[1:], ratios[1:])):
        if r1 >= 1:
            x = math.log2(l0) + (1 - r0) / (r1 - r0) * (math.log2(l1) - math.log2(l0))
            return 2 ** x, "crosses"
    return None, "always"


def phrase(batch: int, fixed: str, at: float | None, how: str, lengths: list[int], ratios: list[float]) -> str:
    """The conclusion's clause for one batch."""
    who = f"at batch {batch} the fixed step ({fixed})"
    if how == "crosses":
        return f"{who} stops beating the best growing-cache step at about {round(at):,} slots"
    if how == "always":
        return (f"{who} beats the best growing-cache step at every length up to {lengths[-1]:,} slots "
                f"({ratios[-1]:.2f}x its time at the longest)")
    if how == "never":
        return f"{who} is already no faster than the best growing-cache step at {lengths[0]:,} slots"
    return f"{who} was not measured against a growing-cache step"


def _time_growing(step: Callable[..., Any], w: Weights, prompt: torch.Tensor, steps: int, clock: Any,
                  warmup: int = 2) -> tuple[list[float], torch.Tensor]:
    """Per-step ms of `steps` growing-cache steps after a fresh prefill (a few untimed steps first)."""
    with torch.no_grad():
        logits, past = decode.growing_prefill(w, prompt)
        toks, at = [logits.argmax(-1, keepdim=True)], [prompt.shape[1], past]

        def one() -> None:  # a recompile, if any, happens in the untimed warm-up and not in the samples
            logits, at[1] = step(toks[-1], at[0], at[1], w)
            toks.append(logits.argmax(-1, keepdim=True))
            at[0] += 1

        samples = time_calls(one, steps, clock, warmup=warmup)
    return samples, torch.cat(toks[1 + warmup:], 1).cpu()


def run(ctx: Context[Options]) -> None:
    o, prof = ctx.options, ctx.profile
    _, w0 = ctx.gpt2("float32")
    fixed = str(o.fixed_method)
    if needs_cuda(fixed) and ctx.device.type != "cuda":
        raise ValueError(f"context_scaling.fixed_method={fixed} needs CUDA: set it to eager on this host")
    ctx.note(N.SWEEP_CONFIG.key, {"max_lens": list(o.max_lens), "batches": list(o.batches), "fills": list(o.fills),
                        "fixed_method": fixed, "growing": list(o.growing), P.STEPS: o.steps, "rounds": o.rounds,
                        "model_positions": int(w0.wpe.shape[0]), "warmup_steps": prof.warmup})
    growing = list(o.growing)
    if "compile" not in growing:
        ctx.skip("growing compile", Code.DISABLED_IN_PROFILE, "the profile times the growing step eagerly only: "
                 "--set context_scaling.growing=eager,compile adds the dynamic-shape compile")
    elif inductor_skip(ctx, "growing compile"):
        growing.remove("compile")
    # by hand: the method table's rows are fixed-shape steps; this is the growing step, one dynamic graph per batch
    compiled = torch.compile(_entry(), dynamic=True) if "compile" in growing else None
    ready: set[int] = set()
    ms: dict[tuple[int, float, int, str], float] = {}
    for batch in o.batches:
        for max_len in o.max_lens:
            w = extend_positions(w0, max_len)
            params = {P.BATCH: batch, P.MAX_LEN: max_len}
            first_prompt = prompt_for(int(w.wte.shape[0]), batch, _prompt_len(o.fills[0], max_len, prof.warmup),
                                      ctx.device, 12000 + batch)
            m = stepmethods.build(fixed, w, first_prompt, max_len, warmup=prof.warmup)
            ctx.metric(M.SETUP_S, round(m.setup_s, 4), **params, variant=f"fixed {fixed}")
            for fill in o.fills:
                p = _prompt_len(fill, max_len, prof.warmup)
                n = max(1, min(o.steps, max_len - p - prof.warmup - 2))
                prompt = prompt_for(int(w.wte.shape[0]), batch, p, ctx.device, 12000 + batch)
                m.prompt = prompt
                variants: dict[str, Callable[[], list[float]]] = {
                    f"fixed {fixed}": lambda m=m, n=n: _time_fixed(m, n, prof.warmup, ctx.clock)}
                tokens: dict[str, torch.Tensor] = {}
                for g in growing:
                    if g == "compile" and batch not in ready:  # one dynamic graph per batch serves every length
                        with compiletrace.traced(ctx, f"growing compile batch={batch}", enabled=o.traces):
                            _, setup = first_call(_first_growing, compiled, w, prompt, device=ctx.device)
                        ready.add(batch)
                        ctx.metric(M.SETUP_S, round(setup, 4), batch=batch, variant="growing compile")
                    step = compiled if g == "compile" else decode.growing_step

                    def timed(step: Callable[..., Any] = step, g: str = g, prompt: torch.Tensor = prompt,
                              n: int = n) -> list[float]:
                        samples, toks = _time_growing(step, w, prompt, n, ctx.clock, prof.warmup)
                        tokens[g] = toks
                        return samples

                    variants[f"growing {g}"] = timed
                samples = rotating_rounds(variants, o.rounds)
                for name, per_round in samples.items():
                    sp = ctx.timing(M.STEP_MS, flat(per_round), **params, fill=fill, variant=name)
                    ms[(batch, fill, max_len, name)] = sp.median
                if "eager" in tokens:  # correctness outside the timed samples: fixed vs growing eager, same steps
                    first = p + 1 + prof.warmup  # the fixed step's first timed token
                    equal = bool(torch.equal(m.state.out[:, first:first + n].cpu(), tokens["eager"]))
                    ctx.metric(M.TOKENS_EQUAL, equal, **params, fill=fill, variant=f"fixed {fixed}")
                    ctx.check(f"fixed and growing-eager tokens equal (batch {batch}, max_len {max_len}, fill {fill})",
                              equal, fatal=False, **params, fill=fill)
            del m
            free_device_memory(ctx.device)
    _conclude(ctx, o, fixed, ms)


def _prompt_len(fill: float, max_len: int, warmup: int) -> int:
    """The prompt that fills the cache to `fill`, leaving room for the untimed steps and at least one timed one."""
    return min(max_len - warmup - 3, max(1, round(fill * max_len)))


def _time_fixed(m: stepmethods.StepMethod, n: int, warmup: int, clock: Any) -> list[float]:
    """Per-step ms of n fixed-shape steps after a fresh prefill and `warmup` untimed steps (as the growing side)."""
    m.start()
    with torch.no_grad():
        return time_calls(m.call, n, clock, warmup=warmup)


_ENTRY: list[Callable[..., Any]] = []


def _entry() -> Callable[..., Any]:
    """decode.growing_step under a code object of its own (Dynamo keeps compiled code per code object, and
    decode_recompiles compiles growing_step itself with other settings)."""
    if not _ENTRY:
        step = decode.growing_step
        code = step.__code__.replace(co_name="growing_step_dynamic", co_qualname="growing_step_dynamic")
        _ENTRY.append(types.FunctionType(code, step.__globals__, "growing_step_dynamic", step.__defaults__,
                                         step.__closure__))
    return _ENTRY[0]


def _first_growing(fn: Callable[..., Any], w: Weights, prompt: torch.Tensor) -> None:
    with torch.no_grad():
        logits, past = decode.growing_prefill(w, prompt)
        fn(logits.argmax(-1, keepdim=True), prompt.shape[1], past, w)


def _conclude(ctx: Context[Options], o, fixed: str, ms: dict[tuple[int, float, int, str], float]) -> None:
    parts, crossings = [], {}
    for batch in o.batches:
        for fill in o.fills:
            lengths, ratios = [], []
            for max_len in o.max_lens:
                f = ms.get((batch, fill, max_len, f"fixed {fixed}"))
                grow = [v for (b, fi, L, name), v in ms.items() if (b, fi, L) == (batch, fill, max_len)
                        and name.startswith("growing")]
                if f is not None and grow:
                    lengths.append(max_len)
                    ratios.append(f / min(grow))
            at, how = crossover(lengths, ratios)
            ctx.metric(M.CROSSOVER_MAX_LEN, None if at is None else round(at), batch=batch, fill=fill)
            crossings[f"batch {batch}, fill {fill}"] = {"how": how, "fixed_over_best_growing": {
                str(L): round(r, 3) for L, r in zip(lengths, ratios)}}
            if abs(fill - o.headline_fill) < 1e-9:
                parts.append(phrase(batch, fixed, at, how, lengths, ratios))
    ctx.note(N.CROSSOVERS.key, crossings)
    if parts:
        sentence = f"With the cache {o.headline_fill:.0%} full, " + "; ".join(parts) + "."
    else:
        sentence = (f"No crossover can be stated: the headline fill {o.headline_fill} was not measured with both a "
                    f"fixed and a growing step.")
    conclude(ctx, sentence, RULE)
