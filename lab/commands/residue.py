"""`python -m lab residue`: does a profiler session in the measuring process move its eager step, on this host?

The lab profiles (kernel counts, op tables) in the same process that times, and every experiment profiles after
it times; but a later experiment times after an earlier one profiled. Whether a session leaves something behind
that slows eager is a property of the host and its torch build (on an H200, torch 2.11: a CUDA session that left
CUPTI attached, +27%; a CPU-only session in a CUDA process, 18-30%), so it is measured here, not assumed, by the
sentinel's own instrument (lab.experiments.sentinel, sentinel_end):

1. two fresh processes build the profile's GPT-2 and take turns with this process, eager round for eager round
   on one CPU (`--pairs` cycles of `--pair-steps` steps, the order rotated each cycle): this process's step over
   theirs, `in_run_over_fresh`, with its 95% interval;
2. this process then runs `--sessions` torch.profiler sessions of its eager step (`--session`): `cpu`, CPU activity
   only; `cuda`, CPU and CUDA activity with CUPTI torn down at the end (the lab's profiler_guard.session, as the
   experiments run it); `none`, nothing: the control, which says how far the instrument itself moves;
3. the same two processes take turns with it again; `in_run_change` (the end's ratio over the start's, each
   process's own constant part cancelled) with its interval is the session's effect, and `fresh_change`, the two
   idle fresh processes' own change, the resolution. The verdict is the sentinel's: clean when the change is within
   5% of 1 or its interval holds 1.

The weights are random (the shapes are the profile's): a residue is a cost per operation, not per value. Nothing is
written (the libraries' own lines go through a temporary file, removed at the end, and are counted);
`--json` prints the figures as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

SESSIONS = ("cpu", "cuda", "none")


class ChildFailed(RuntimeError):
    """A fresh process failed or timed out (the host's doing, or the lab's: its error says which): no figure."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("residue", help="whether a profiler session slows this process's eager step on this host "
                                       "(fresh processes taking turns with it, before and after)")
    p.add_argument("--profile", default="cpu", help="the profile whose model and device are used (default cpu; gpu on "
                                                    "a CUDA host, smoke for a tiny model)")
    p.add_argument("--session", choices=SESSIONS, default="cpu",
                   help="what runs between the two sets of paired rounds: a CPU-only profiler session, a CPU+CUDA one "
                        "(CUPTI torn down), or nothing (the control)")
    p.add_argument("--sessions", type=int, default=3, help="profiler sessions of the eager step (default 3)")
    p.add_argument("--pairs", type=int, default=40, help="cycles of eager rounds at each end (default 40)")
    p.add_argument("--pair-steps", type=int, default=16, help="decode steps in each paired round (default 16)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    return p


def _checked(args: argparse.Namespace) -> tuple[Any, Any]:
    """The profile and the sentinel's options for these arguments; ValueError (one line) for bad input."""
    import torch

    from lab.contract import profiles
    from lab.contract.names import Experiment
    from lab.experiments import sentinel

    if args.sessions < 1 or args.pairs < 2 or args.pair_steps < 1:
        raise ValueError(f"--sessions {args.sessions} --pairs {args.pairs} --pair-steps {args.pair_steps}: at least 1 "
                         "session, 2 pairs (an interval needs two) and 1 step")
    try:
        profile = profiles.get(args.profile)
    except ValueError as exc:
        raise ValueError(f"--profile: {exc}") from None
    cuda = profile.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise ValueError(f"--profile {args.profile} runs on CUDA: no CUDA device visible to torch (use --profile cpu)")
    if args.session == "cuda" and not cuda:
        raise ValueError(f"--session cuda: the profile {args.profile} runs on the CPU (a CUDA session needs --profile "
                         "gpu on a CUDA host)")
    own = dict(profile.options.get(Experiment.SENTINEL, {}))
    options = sentinel.Options(**{**own, "pairs": args.pairs, "pair_steps": args.pair_steps})
    return profile, options


def _sessions(ctx: Any, kind: str, n: int) -> None:
    """`n` profiler sessions of the run's own eager step (lab.measure.profiler_guard.session)."""
    import torch

    from lab.experiments.common import paired
    from lab.measure import profiler_guard

    if kind == "none":
        return
    step = paired.own_eager(ctx, ctx.options.pair_steps)
    for i in range(n):
        with profiler_guard.session(f"residue {kind} session {i + 1}", cuda=kind == "cuda"), torch.no_grad():
            step()
            if kind == "cuda":
                torch.cuda.synchronize()


def _figure(rec: Any, spec: Any) -> dict[str, float | None] | None:
    """A metric and its interval's ends from a record (None: not recorded)."""
    from lab.experiments.common import paired

    names = (spec.name, *(spec.interval or ()))
    found = [rec.metric(n, **paired.PARAMS) for n in names]
    if found[0] is None:
        return None
    value, low, high = (None if m is None else m.value for m in found)
    return {"value": value, "low": low, "high": high}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The paired rounds before and after the sessions, and the verdict (lab.experiments.sentinel_end); what the
    libraries wrote meanwhile (lab.run.librarylogs, through a temporary file removed at the end) as `library_logs`."""
    from lab.run.librarylogs import Capture

    profile, options = _checked(args)
    with tempfile.TemporaryDirectory(prefix="lab-residue-") as tmp, Capture(Path(tmp)) as capture:
        collected = capture.begin()  # the profiler's own lines (kineto's USDT ...) kept off the console
        try:
            out = _paired(profile, options, args)
        finally:
            logs = capture.end(collected)
    out["library_logs"] = [{"origin": log.origin, "message": log.message, "count": log.count} for log in logs]
    return out


def _paired(profile: Any, options: Any, args: argparse.Namespace) -> dict[str, Any]:
    from lab.contract import metrics as M
    from lab.contract.catalogue import BY_ID
    from lab.contract.names import Experiment, Status
    from lab.contract.results import Record
    from lab.experiments import sentinel, sentinel_end
    from lab.experiments.common import paired
    from lab.run.context import Context, ModelCache

    models = ModelCache(profile, {"source": "random"})
    results = SimpleNamespace(experiments=[], manifest=None)

    def context(eid: str) -> Context[Any]:
        return Context(BY_ID[eid], profile, None, Record(eid, "", Status.OK.value), results, models,  # type: ignore[arg-type]
                       options=options)

    try:
        start = context(Experiment.SENTINEL)
        began = sentinel.measure_paired(start, "start")
        if began is None:
            raise ChildFailed(f"the fresh processes did not measure the step: {_failed(start.record)}")
        paired.record(start, began)
        results.experiments.append(start.record)
        _sessions(start, args.session, args.sessions)
        end = context(Experiment.SENTINEL_END)
        ended = sentinel.measure_paired(end, "end", began.pinned.get(paired.IN_RUN))
        if ended is None:
            raise ChildFailed(f"the fresh processes did not measure the step again: {_failed(end.record)}")
        sentinel_end.record_paired(end, ended, began)
    finally:
        models.close()
    [verdict] = [c for c in end.record.checks if "where it started" in c.name]
    return {"profile": profile.name, "device": profile.device, "model": profile.model.name, "session": args.session,
            "sessions": args.sessions, "pairs": args.pairs, "pair_steps": args.pair_steps,
            "step_ms": statistics.median(x for r in ended.in_run for x in r),
            "in_run_over_fresh": {"start": _figure(start.record, M.IN_RUN_OVER_FRESH),
                                  "end": _figure(end.record, M.IN_RUN_OVER_FRESH)},
            "in_run_change": _figure(end.record, M.IN_RUN_CHANGE), "fresh_change": _figure(end.record, M.FRESH_CHANGE),
            "clean": verdict.passed, "detail": verdict.detail}


def _failed(record: Any) -> str:
    return "; ".join(c.detail for c in record.checks if not c.passed) or "no detail"


def _text(fig: dict[str, float | None] | None) -> str:
    if fig is None or fig["value"] is None:
        return "not measured"
    inside = "" if fig["low"] is None or fig["high"] is None else f" [{fig['low']:.3f}, {fig['high']:.3f}]"
    return f"{fig['value']:.3f}x{inside}"


def main(args: argparse.Namespace) -> int:
    try:
        out = measure(args)
    except ChildFailed as exc:
        print(f"python -m lab residue: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(out))
        return 0
    what = {"cpu": "CPU-only profiler sessions", "cuda": "CPU+CUDA profiler sessions (CUPTI torn down)",
            "none": "no profiler session (the control)"}[args.session]
    ratio = out["in_run_over_fresh"]
    print(f"{out['model']} ({out['profile']} profile) on {out['device']}, eager at batch 1, {out['step_ms']:.4g} ms a "
          f"step; two fresh processes taking turns with this one, {out['pairs']} cycles of {out['pair_steps']} steps")
    print(f"  before: this process {_text(ratio['start'])} the fresh ones")
    print(f"  then:   {out['sessions']} x {what}")
    print(f"  after:  {_text(ratio['end'])}")
    print(f"  change: {_text(out['in_run_change'])}  (the fresh processes' own: {_text(out['fresh_change'])})")
    print("  verdict: " + ("clean: within 5% of where it started, or the interval holds 1" if out["clean"] else
                           "moved: the sessions slowed this process's eager step by more than 5%"))
    if out["library_logs"]:
        n = sum(log["count"] for log in out["library_logs"])
        print(f"  ({n} line(s) the libraries wrote kept off the console; --json lists them)")
    return 0
