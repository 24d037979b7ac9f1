"""sentinel: the decode step measured in a fresh process with nothing else loaded, before the run measures anything.

The run's own eager step is the denominator of every speedup, and a process that has compiled,
captured and profiled for minutes can slow it (a profiler that left CUPTI attached, a host that got
busier). So a GPU run measures the same step outside itself: a child process that imports torch,
builds the run's GPT-2 (same shape, same weights) and times eager and graph replay at batch 1 in
fp32. `sentinel_step_ms` (params method, batch, dtype, when=start) holds each, with its interval;
`sentinel_end` measures again at the end of the run and compares.

A fresh process can start slow (on one H200 host the first four rounds of eager ran at 5.3-5.5 ms a
step and the fifth at 2.7 ms), so the child warms up until two consecutive round medians agree within
`agree` (at most `max_rounds` rounds), and only the rounds after that are the sample. The child also
measures the cost of one tiny eager op, the host's dispatch speed, clean: the manifest's
`host_dispatch.launch_us_per_op` (lab.run.manifest).
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Any

from lab.contract import metrics as M
from lab.contract.names import Method
from lab.contract.options import option
from lab.experiments.common.sweep import provenance
from lab.run.childproc import run_child
from lab.run.context import Context

METHODS = (Method.EAGER, Method.GRAPH)


@dataclass(frozen=True)
class Options:
    steps: int = option(64, "decode steps per round")
    rounds: int = option(5, "rounds kept after the warm-up")
    max_rounds: int = option(20, "at most this many rounds of warm-up before the kept ones")
    agree: float = option(0.05, "warm-up ends when two consecutive round medians of eager agree within this fraction")
    timeout_s: float = option(240.0, "the child's time limit")


def child(model: dict[str, Any], provenance: dict[str, Any], device: str, prompt_len: int, max_len: int, steps: int,
          rounds: int, max_rounds: int, agree: float, methods: tuple[str, ...] = METHODS,
          profile_then_time: bool = False) -> dict[str, Any]:
    """In a fresh process: the run's GPT-2 at batch 1 in fp32, eager and graph replay, warmed until stable."""
    import torch

    from lab.contract.profiles import ModelSpec
    from lab.measure.timing import clock_for, rotating_rounds
    from lab.step import ceilings
    from lab.step import methods as stepmethods
    from lab.step.model import build_model, extract_weights

    spec = ModelSpec(**model)
    w = extract_weights(build_model(spec, provenance, device=device), torch.float32, device)
    g = torch.Generator().manual_seed(1001)
    prompt = torch.randint(0, spec.vocab_size, (1, prompt_len), generator=g).to(device)
    built = {m: stepmethods.build(m, w, prompt, max_len, warmup=3) for m in methods}
    clock = clock_for(device)
    calls = {m: (lambda b=b: b.decode(steps, clock, readback=False)) for m, b in built.items()}
    warm, last = 0, None
    while warm < max_rounds:  # warm up until eager's round medians agree
        med = statistics.median(calls[Method.EAGER]())
        for other in (m for m in calls if m != Method.EAGER):
            calls[other]()
        warm += 1
        if last is not None and abs(med - last) <= agree * last:
            break
        last = med
    samples = rotating_rounds(calls, rounds)
    launch = ceilings.launch_us_eager(torch.device(device))
    out = {"rounds": {m: r for m, r in samples.items()}, "warmup_rounds": warm, "launch_us_eager": launch}
    if profile_then_time:  # the residue test: profile each method once, then time them again in this process
        from lab.measure.stepprofile import count_kernels

        for b in built.values():
            b.start()
            count_kernels(b.call, torch.device(device))
        out["after_profile"] = rotating_rounds(calls, rounds)
    return out


def measure(ctx: Any, when: str) -> dict[str, Any] | None:
    """Run the child and record `sentinel_step_ms` per method (params method, batch 1, fp32, when); None if it failed."""
    o, prof = ctx.options, ctx.profile
    steps = min(o.steps, prof.max_len - prof.prompt_len - 2)  # a step past the cache's end is a device assert
    ctx.progress(f"sentinel ({when}): eager and graph replay at batch 1 in a fresh process")
    res = run_child("lab.experiments.sentinel:child",
                    {"model": dataclasses.asdict(prof.model), "provenance": provenance(ctx), "device": ctx.device.type,
                     "prompt_len": prof.prompt_len, "max_len": prof.max_len, "steps": steps, "rounds": o.rounds,
                     "max_rounds": o.max_rounds, "agree": o.agree}, timeout_s=o.timeout_s)
    if not res.ok:
        ctx.check(f"the sentinel child measured the step ({when})", False, detail=res.describe(), fatal=True)
        return None
    value = res.value
    for method, per_round in value["rounds"].items():
        ctx.timing(M.SENTINEL_STEP_MS, per_round, method=method, batch=1, dtype="float32", when=when)
    launch = value["launch_us_eager"]
    ctx.timing(M.LAUNCH_US_PER_OP_SAMPLES, launch, mode="eager", when=when)
    ctx.metric(M.LAUNCH_US_PER_OP, round(min(launch), 4), mode="eager", when=when)
    ctx.note(f"warmup_rounds.{when}", value["warmup_rounds"])
    return value


def run(ctx: Context) -> None:
    if ctx.device.type != "cuda":  # the catalogue says so too; kept for a direct call
        raise RuntimeError("the sentinel measures a CUDA step")
    measure(ctx, "start")


def sentinel_ms(records: list[Any], method: str, when: str) -> float | None:
    """The sentinel's step time of `method` at `when` in this run's records (None: not measured)."""
    for rec in records:
        if rec.id in ("sentinel", "sentinel_end") and rec.status == "OK":
            m = rec.find(M.SENTINEL_STEP_MS.name, method=method, when=when)
            if m is not None:
                return float(m.value)
    return None


