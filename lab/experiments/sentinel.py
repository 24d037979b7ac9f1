"""sentinel: the decode step measured in a fresh process with nothing else loaded, before the run measures anything.

The run's own eager step is the denominator of every speedup, and a process that has compiled,
captured and profiled for minutes can slow it (a profiler that left CUPTI attached, a host that got
busier). So a GPU run measures the same step outside itself: a child process that imports torch,
builds the run's GPT-2 (same shape, same weights) and times eager and graph replay at batch 1 in
fp32. `sentinel_step_ms` (params method, batch, dtype, when=start) holds each, with its interval;
`sentinel_end` measures again at the end of the run and compares.

The warm-up rule, and why. A fresh process can start slow: on one H200 host the kept rounds of eager
were 5.90, 5.94, 5.91, 5.68 and 3.40 ms a step against 3.65 ms in the run, because the warm-up had
stopped when two consecutive round medians agreed, while still on the slow plateau; the sentinel, not
the run, was wrong. So the child warms up by `lab.measure.timing.warm_until_steady`: rounds of every
method until at least `warmup_s` seconds have passed, the last `window` round medians of eager agree
within `agree` and the last is not above the best seen by more than `agree` (at most `max_rounds`).
Eager leads the rule: it is the denominator of every speedup and the step a slow start hits (its host
dispatch); graph replay is the device's time. Then the kept rounds are timed (rotating order) and put
to the drift test (`lab.measure.timing.still_improving`: a method whose last kept round is faster than
its first by more than `agree` was still warming up while measured). A take that drifted is
discarded, and the child warms up again and takes again, at most `retakes` times. The record notes
the warm-ups (`warmup.{when}`: rounds, seconds, retakes, the round medians, and the host-speed index
around every round, lab.measure.hostspeed, with how far it moved, `host_moved`) and holds a non-fatal
check "the sentinel's rounds were steady" that fails, with the round medians, when the last take
still drifted while the host's index held still: rounds that drifted, or a warm-up that ran out of its
budget, while the index moved by more than `agree` are the host's doing, reported as a host warning
(the `host_warnings` note) with the index as the reason, never as a failed check. Why these defaults: 10 s is longer than the slow starts seen on H200 hosts (a few
seconds), 5% is tighter than the 10% the run is judged by, and 100 rounds of GPT-2 124M at 64 steps
(0.3-0.45 s a round of eager and graph) is the time limit's share; with two retakes the child stays
well inside `timeout_s`.

The child also measures the cost of one tiny eager op, the host's dispatch speed, clean: the
manifest's `host_dispatch.launch_us_per_op` (lab.run.manifest). Started by lab.run.turns (as
sentinel_end starts it), it then stays alive and answers each request with one round of eager between
two samples of the index (`serve`): the paired rounds sentinel_end judges the run's own eager by.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

from lab.contract import metrics as M
from lab.contract import notes as N
from lab.contract.names import Experiment, Method, Param as P, Status
from lab.contract.options import option
from lab.experiments.common.sweep import provenance
from lab.host import cpuplace, procstat
from lab.contract import hostspeed
from lab.experiments.common import hostspeed as hostspeed_record
from lab.experiments.common.hostspeed import host_warning
from lab.experiments.common import paired
from lab.measure import profiler_guard
from lab.measure.hostspeed import HostIndex
from lab.measure.timing import WarmUp, rotating_rounds, still_improving, warm_until_steady
from lab.run import turns
from lab.run.childproc import run_child
from lab.run.context import Context

METHODS = (Method.EAGER, Method.GRAPH)


@dataclass(frozen=True)
class Options:
    steps: int = option(64, "decode steps per round")
    rounds: int = option(5, "rounds kept after the warm-up")
    warmup_s: float = option(10.0, "the warm-up lasts at least this many seconds (a fresh process can start slow)")
    window: int = option(3, "the warm-up ends only when this many consecutive round medians of eager agree")
    agree: float = option(0.05, "the fraction within which the warm-up's rounds agree, and by which the kept rounds "
                                "may improve from first to last before the take is discarded and taken again")
    max_rounds: int = option(100, "at most this many rounds in each warm-up")
    retakes: int = option(2, "at most this many retakes when the kept rounds were still improving")
    budget_s: float = option(12.0, "the warm-ups and retakes together stop after this many seconds: a host whose speed "
                                   "keeps moving is reported unsteady, not waited out")
    timeout_s: float = option(240.0, "the child's time limit (for each of its answers)")
    pairs: int = option(24, "cycles of eager rounds, one of each fresh child and of the run's own, in rotating order")
    pair_steps: int = option(32, "decode steps in each paired round: shorter rounds, more pairs (the ratio is taken "
                                 "per pair, and a host's speed flips within seconds)")


def rule(o: Any) -> dict[str, Any]:
    """The warm-up rule's arguments from the Options (the child's keyword arguments, also the CUDA tests')."""
    return {"rounds": o.rounds, "min_s": o.warmup_s, "window": o.window, "agree": o.agree,
            "max_rounds": o.max_rounds, "retakes": o.retakes, "budget_s": o.budget_s}


@dataclass(frozen=True)
class Take:
    """The rounds kept (per method, per round), the warm-up before each take, the methods whose last take drifted."""

    rounds: dict[str, list[list[float]]]
    warmups: tuple[WarmUp, ...]
    drifting: tuple[str, ...]
    budget_s: float = math.inf
    out_of_budget: bool = False  # the warm-up budget ran out (before the warm-up settled, or before a retake)
    index: HostIndex | None = None  # the host-speed index around every turn, warm-up ("warmup.{method}") and kept
    warm_rounds: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # every warm-up round's median

    @property
    def retakes(self) -> int:
        return len(self.warmups) - 1

    def medians(self) -> dict[str, list[float]]:
        return {m: [round(statistics.median(r), 5) for r in rs] for m, rs in self.rounds.items()}

    def summary(self) -> dict[str, Any]:
        """The record's `warmup.{when}` note (lab.contract.notes.WARMUP)."""
        return {"rounds": sum(w.rounds for w in self.warmups), "seconds": round(sum(w.seconds for w in self.warmups), 3),
                "retakes": self.retakes, "warmup_steady": self.warmups[-1].steady,
                "warmup_medians_ms": [round(x, 5) for x in self.warmups[-1].medians],
                "round_medians_ms": self.medians(), "drifting": list(self.drifting),
                "budget_s": self.budget_s if math.isfinite(self.budget_s) else None, "out_of_budget": self.out_of_budget,
                "warmup_rounds_ms": {m: [round(x, 5) for x in xs] for m, xs in self.warm_rounds.items()}, **self.host()}

    def host(self) -> dict[str, Any]:
        """What the host's speed did meanwhile: the index of each round (warm-up and kept, ms) and how far it moved
        (p95 over p5, lab.contract.hostspeed.spread_ratio); {} without an index."""
        if self.index is None:
            return {}
        rounds = {name: self.index.per_round(name) for name in self.index.turns}
        moved = hostspeed.spread_ratio([x for xs in rounds.values() for x in xs])
        return {"index_ms": rounds, "host_moved": None if moved is None else round(moved, 4)}


def steady_take(calls: dict[str, Callable[[], list[float]]], *, rounds: int, min_s: float, window: int, agree: float,
                max_rounds: int, retakes: int, budget_s: float = math.inf, lead: str = Method.EAGER,
                now: Callable[[], float] = time.monotonic, index: HostIndex | None = None) -> Take:
    """Warm up (every method each round, `lead`'s median judged), take `rounds` kept rounds in rotating order, and
    take again after a new warm-up while a method's kept rounds were still improving, at most `retakes` times.

    The warm-ups and retakes share `budget_s` seconds: a warm-up stops when the budget is spent (unsteady), and no
    retake starts once it is. On a host whose CPU speed moves the whole time (an H200 host's eager rounds moved
    between 2.9 and 6.4 ms for 65 s of warm-up), waiting does not make the process steady: the take is kept, the
    note says the budget ran out, with the host-speed index of every round (`index`, lab.measure.hostspeed) as the
    reason: the steadiness check judges from it whether the host moved or the process did."""
    start = now()

    warm: dict[str, list[float]] = {m: [] for m in calls}

    def warm_round() -> float:  # every method's turn, each between index samples; the lead's median judged
        for m in sorted(calls, key=lambda m: m != lead):
            warm[m].append(statistics.median(calls[m]() if index is None else index.turn(f"warmup.{m}", calls[m])))
        return warm[lead][-1]

    warmups: list[WarmUp] = []
    while True:
        left = budget_s - (now() - start)
        warmups.append(warm_until_steady(warm_round, min_s=min(min_s, left), agree=agree, window=window,
                                         max_rounds=max_rounds, budget_s=left, now=now))
        samples = rotating_rounds(calls, rounds, index=index)
        drifting = tuple(m for m, rs in samples.items() if still_improving([statistics.median(r) for r in rs], agree))
        spent = now() - start >= budget_s
        if not drifting or len(warmups) > retakes or spent:
            out = spent and (bool(drifting) and len(warmups) <= retakes or not warmups[-1].steady)
            return Take(samples, tuple(warmups), drifting, budget_s, out, index, warm)


def child(model: dict[str, Any], provenance: dict[str, Any], device: str, prompt_len: int, max_len: int, steps: int,
          rounds: int, min_s: float, window: int, agree: float, max_rounds: int, retakes: int, budget_s: float,
          methods: tuple[str, ...] = METHODS, profile_then_time: bool = False,
          pair_steps: int | None = None, gate: bool = False) -> dict[str, Any]:
    """In a fresh process: the run's GPT-2 at batch 1 in fp32, eager and graph replay, warmed until steady
    (`steady_take`). Started by lab.run.turns, it then serves eager rounds of `pair_steps` steps (default `steps`);
    with `gate` it first waits for a request before it touches the device (sentinel_end's second fresh process)."""
    import torch

    from lab.contract.profiles import ModelSpec
    from lab.measure.timing import clock_for
    from lab.step import ceilings
    from lab.step import methods as stepmethods
    from lab.step.model import build_model, extract_weights

    chan = turns.channel()
    if gate and chan is not None:  # a second fresh process imports while the first warms up, then waits for "go"
        import transformers  # noqa: F401 - its import is the slow part of building the model

        if chan.request() is None:  # the parent is done before it needed this one
            return {}
    spec = ModelSpec(**model)
    w = extract_weights(build_model(spec, provenance, device=device), torch.float32, device)
    g = torch.Generator().manual_seed(1001)
    prompt = torch.randint(0, spec.vocab_size, (1, prompt_len), generator=g).to(device)
    built = {m: stepmethods.build(m, w, prompt, max_len, warmup=3) for m in methods}
    clock = clock_for(device)
    calls = {m: (lambda b=b: b.decode(steps, clock, readback=False)) for m, b in built.items()}
    lead = Method.EAGER if Method.EAGER in calls else next(iter(calls))
    round_cpus: list[int | None] = []
    timed_lead = calls[lead]

    def lead_round() -> list[float]:  # the CPU is read after the round's marks are read (outside the timing)
        samples = timed_lead()
        round_cpus.append(cpuplace.thread_cpu())
        return samples

    calls[lead] = lead_round

    def take_now() -> dict[str, Any]:  # the take, the launch cost and where its rounds ran
        round_cpus.clear()
        take = steady_take(calls, rounds=rounds, min_s=min_s, window=window, agree=agree, max_rounds=max_rounds,
                           retakes=retakes, budget_s=budget_s, lead=lead, index=HostIndex())
        launch = ceilings.launch_us_eager(torch.device(device))
        where = cpuplace.placement().as_dict() | {"round_cpus": list(round_cpus)}
        return {"rounds": take.rounds, "warmup": take.summary(), "launch_us_eager": launch, "placement": where}

    out = take_now()
    if profile_then_time:  # the residue test: profile each method once, then time them again in this process
        from lab.measure.stepprofile import count_kernels

        for b in built.values():
            b.start()
            count_kernels(b.call, torch.device(device))
        out["after_profile"] = rotating_rounds(calls, rounds)
    if chan is not None:  # started by lab.run.turns.Turns: alternate eager rounds with the parent (sentinel_end)
        lead_built = built[lead]
        serve(chan, lambda: lead_built.decode(pair_steps or steps, clock, readback=False), out, take_now)
    return out


def serve(chan: turns.Channel, eager: Callable[[], list[float]], ready: dict[str, Any],
          take: Callable[[], dict[str, Any]] | None = None) -> None:
    """The paired fresh process: say it is ready (with its take), then answer each request with one round of eager
    between two fresh samples of the host index and what the host did meanwhile (lab.host.procstat), until the
    parent is done; a request {"pin": cpu} binds the child's thread to that CPU alone (null: to those it had),
    {"take": true} warms up and
    takes again (the run's end: the same process that took at its start, lab.experiments.sentinel_end)."""
    chan.answer({"ready": ready})
    index, free = HostIndex(), cpuplace.allowed()
    while (request := chan.request()) is not None:
        if "pin" in request:  # the paired rounds run on the parent's CPU; {"pin": null} frees the thread again
            cpuplace.release(free)
            chan.answer({"pinned": cpuplace.pin_thread(request["pin"])})
            continue
        if request.get("take") and take is not None:
            chan.answer({"ready": take()})
            continue
        start = procstat.snapshot()
        samples = index.turn("fresh", eager, share=False)
        host = procstat.between(start, procstat.snapshot())
        before, after = index.turns["fresh"][-1]
        chan.answer({"samples": samples, "index": [before, after], "host": host})


def host_moved(warmup: dict[str, Any], agree: float) -> bool:
    """Whether the host's speed moved by more than `agree` (p95 over p5 of its index) while the child warmed up and
    took its rounds (False where the note holds no index: an older run's)."""
    moved = warmup.get("host_moved")
    return moved is not None and moved > 1 + agree


def steadiness(ctx: Any, warmup: dict[str, Any], when: str, agree: float) -> bool:
    """The non-fatal check that the kept rounds were steady (the drift test passed on the last take). Rounds that
    drifted, or a warm-up that ran out of budget, while the host index moved by more than `agree` are the host's
    doing: a host warning with the index's range, and the check is not failed for it."""
    drifting = warmup["drifting"]
    medians = "; ".join(f"{m} {', '.join(f'{x:.4g}' for x in xs)} ms"
                        for m, xs in warmup["round_medians_ms"].items() if not drifting or m in drifting)
    how = (f"after {warmup['retakes']} retake(s) the kept rounds still got faster by more than {agree:.0%} from the "
           f"first to the last: {medians}" if drifting else
           f"{warmup['rounds']} warm-up rounds in {warmup['seconds']:.1f} s, {warmup['retakes']} retake(s); kept round "
           f"medians {medians}")
    moved = host_moved(warmup, agree)
    index = (f"; the host-speed index moved {warmup['host_moved']:.2f}x (p95/p5) meanwhile"
             if warmup.get("host_moved") is not None else "")
    if warmup.get("out_of_budget"):
        how += (f" (the warm-up budget of {warmup['budget_s']:.0f} s ran out before the step settled{index}"
                + (": the host moved, not the lab)" if moved else ")"))
    elif not warmup["warmup_steady"]:
        how += f" (the last warm-up ran out of rounds before it settled{index})"
    elif index:
        how += index
    if moved and (drifting or warmup.get("out_of_budget")):
        host_warning(ctx, f"the fresh process ({when}) did not settle: {how}")
    return ctx.check(f"the sentinel's rounds were steady ({when})", not drifting or moved, detail=how, fatal=False,
                     when=when)


CHILD = "lab.experiments.sentinel:child"


def steps_of(ctx: Any) -> int:
    """Decode steps a round: the option, less where the cache would end first (a step past its end is a device
    assert)."""
    return int(min(ctx.options.steps, ctx.profile.max_len - ctx.profile.prompt_len - 2))


def child_kwargs(ctx: Any) -> dict[str, Any]:
    """The child's arguments: the run's model and weights, its device and shape, the warm-up rule, its methods (eager
    alone off CUDA: graph replay needs a CUDA device; `python -m lab residue` pairs eager rounds on a CPU host)."""
    prof = ctx.profile
    methods = list(METHODS) if ctx.device.type == "cuda" else [Method.EAGER]
    return {"model": dataclasses.asdict(prof.model), "provenance": provenance(ctx), "device": ctx.device.type,
            "prompt_len": prof.prompt_len, P.MAX_LEN: prof.max_len, P.STEPS: steps_of(ctx), **rule(ctx.options),
            "methods": methods}


def measure(ctx: Any, when: str) -> dict[str, Any] | None:
    """Run the child and record `sentinel_step_ms` per method (params method, batch 1, fp32, when); None if it failed."""
    ctx.progress(f"sentinel ({when}): eager and graph replay at batch 1 in a fresh process")
    res = run_child(CHILD, child_kwargs(ctx), timeout_s=ctx.options.timeout_s)
    if not res.ok:
        ctx.check(f"the sentinel child measured the step ({when})", False, detail=res.describe(), fatal=True)
        return None
    record_take(ctx, res.value, when)
    return res.value


def record_take(ctx: Any, value: dict[str, Any], when: str) -> None:
    """Record what the child returned: `sentinel_step_ms` per method, the launch cost, the warm-up and placement
    notes, the steadiness check."""
    for method, per_round in value["rounds"].items():
        ctx.timing(M.SENTINEL_STEP_MS, per_round, method=method, batch=1, dtype="float32", when=when)
    launch = value["launch_us_eager"]
    ctx.timing(M.LAUNCH_US_PER_OP_SAMPLES, launch, mode="eager", when=when)
    ctx.metric(M.LAUNCH_US_PER_OP, round(min(launch), 4), mode="eager", when=when)
    ctx.note(N.WARMUP.key_for(when=when), value["warmup"])
    if "placement" in value:
        ctx.note(N.PLACEMENT.key_for(when=when), value["placement"])
    steadiness(ctx, value["warmup"], when, ctx.options.agree)
    for method, (index, medians) in host_points(value["warmup"]).items():
        hostspeed_record.put(ctx, M.HOST_SENSITIVITY, hostspeed.sensitivity(index, medians), 4, method=method,
                             batch=1, dtype="float32", when=when)


def host_points(warmup: dict[str, Any]) -> dict[str, tuple[list[float], list[float]]]:
    """Per method, (index, round median) of every round the fresh process timed: its warm-up rounds but the first
    (the process's own start, not the host's) and its kept rounds. Why the warm-up too: a warm-up lasts 6-12 s, tens
    of rounds against the 5 kept, and a shared host's speed moves within it (1.7-1.9x on an H200 host), so the
    elasticity of eager and of graph replay is told apart with an interval, where 5 rounds on a calm minute cannot;
    the drift of a slow start would count as the host's only where the index moved with it. {} for an older note."""
    index, warm, kept = warmup.get("index_ms") or {}, warmup.get("warmup_rounds_ms") or {}, warmup["round_medians_ms"]
    out = {}
    for method, medians in warm.items():
        w_index, k_index = index.get(f"warmup.{method}", []), index.get(method, [])[-len(kept.get(method, [])):]
        if len(w_index) == len(medians) and len(k_index) == len(kept.get(method, [])):
            out[method] = (w_index[1:] + k_index, medians[1:] + kept[method])
    return out


KEPT = ("sentinel.fresh", "sentinel.fresh-2")  # the two fresh processes, kept open from the run's start to its end


def measure_paired(ctx: Any, when: str, cpu: int | None = None) -> paired.Paired | None:
    """The fresh processes' take (recorded at `when`), then `pairs` cycles of eager rounds taking turns with the run's
    own, every side pinned to `cpu` (the start's, at the end) where this thread may run on it, else to the run's
    thread's CPU (restored after); None if the first child failed. The same core at both ends: on the H200 a run's
    start took its turns on CPU 4 and its end on CPU 0, and the verdict divides one by the other.

    At the start two children are started and kept open for the end (lab.run.context.ModelCache.keep: closed when
    the run ends, however it ends; each answer has `timeout_s`); the second imports meanwhile and warms up only after
    the first's take, so that no two processes share the GPU while one is measured. Between the two ends they only
    wait for a request. At the end the same two take again and take turns again; where none were kept (a run of
    sentinel_end alone, a resumed run) two new ones are started and finished here."""
    o = ctx.options
    ctx.progress(f"sentinel ({when}): fresh processes, then eager rounds taking turns with the run's own")
    steps = min(o.pair_steps, steps_of(ctx))
    kwargs = child_kwargs(ctx) | {"pair_steps": steps}
    second = kwargs | {"gate": True, "methods": [Method.EAGER], "min_s": o.warmup_s / 2, "budget_s": o.budget_s / 2}
    kept = [ctx.kept(key) for key in KEPT] if when == "end" else [None, None]
    with contextlib.ExitStack() as local:
        sides, here = [], False  # here: started here and finished here (not kept from the start, nor for the end)
        for key, found, kw in zip(KEPT, kept, (kwargs, second)):
            if found is None:  # kept for the end where this is the start of a run
                new = turns.Turns(CHILD, kw, timeout_s=o.timeout_s)
                found = ctx.keep(key, new) if when == "start" else None
                if found is None:
                    found, here = local.enter_context(new), True
            sides.append(found)
        child, twin = sides
        done = here or when != "start"  # finished here: no later turn
        try:
            record_take(ctx, (child.wait() if kept[0] is None else child.ask({"take": True}))["ready"], when)
            fresh = {paired.FRESH: child}
            try:  # the second touches the GPU only now, after the first's take
                twin.ask({"take": True} if kept[1] is not None else {"go": True})
                fresh[paired.SECOND] = twin
            except turns.ChildGone as exc:  # the verdict then rests on one fresh process, and says so
                ctx.check(f"the second fresh process warmed up ({when})", False, fatal=False,
                          detail=f"{exc}: {twin.finish().describe()}; the verdict has no resolution")
            own = paired.own_eager(ctx, steps)
            own()  # the run's own build warmed (its process is warm already)
            profiler_guard.check_clean(f"the paired rounds of the sentinel ({when})")
            target = cpu if cpu in (cpuplace.allowed() or ()) else cpuplace.thread_cpu()
            with cpuplace.pinned(target) as cpu:  # every side on one CPU: the same core's speed
                pinned = {paired.IN_RUN: cpu, **{side: None if cpu is None else c.ask({"pin": cpu})["pinned"]
                                                 for side, c in fresh.items()}}
                out = paired.alternate(own, {side: functools.partial(paired.ask_round, c) for side, c in fresh.items()},
                                       o.pairs)
            out.pinned = pinned
            for c in fresh.values():
                if cpu is not None and not done:  # free again while they wait for the end
                    c.ask({"pin": None})
        except turns.ChildGone as exc:
            ctx.check(f"the sentinel child measured the step ({when})", False, detail=f"{exc}: "
                      f"{child.finish().describe()}", fatal=True)
            return None
        if done:
            child.finish()
            twin.finish()
    return out


def run(ctx: Context[Options]) -> None:
    if ctx.device.type != "cuda":  # the catalogue says so too; kept for a direct call
        raise RuntimeError("the sentinel measures a CUDA step")
    if not turns.supported():  # Windows: the fresh process's take alone (sentinel_end says why there is no verdict)
        measure(ctx, "start")
        return
    out = measure_paired(ctx, "start")
    if out is not None:
        paired.record(ctx, out)


def sentinel_ms(records: list[Any], method: str, when: str) -> float | None:
    """The sentinel's step time of `method` at `when` in this run's records (None: not measured)."""
    for rec in records:
        if rec.id in (Experiment.SENTINEL, Experiment.SENTINEL_END) and rec.status == Status.OK:
            m = rec.find(M.SENTINEL_STEP_MS.name, method=method, when=when)
            if m is not None:
                return float(m.value)
    return None


