"""`python -m lab run --profile NAME [--only ID,...] [--out DIR] [--set EXP.KEY=VALUE] [--resume
[--allow-source-change] | --force] [--stop-after SECONDS] [-v] [--strict]`: run experiments, write DIR/results.json.

DIR is owned by one run at a time; a DIR that already holds a run is refused unless --resume (keep its
OK records, run the rest) or --force (move it aside to DIR.old-<time>) says what to do with it. A resume
measures what the first start measured: another resolved profile, other weights or (without
--allow-source-change) another lab source is refused.
The run talks on stderr (lab.console); its last line, on stdout, names the results file with the counts,
the NOT_RUN codes and the failed checks. The exit status is 0 whatever the results, unless `--strict`:
then 1 when an experiment FAILED or any check failed.

`--stop-after SECONDS` makes a run in chunks for a host that caps one command's time (lab.run.budget):
between experiments, the run stops before one it expects to end past SECONDS from the command's start,
leaving DIR resumable (state `stopped`); its last line is the exact command that continues it (`--resume`
with the same options), and the exit status is 75 (EXIT_STOPPED), so a script loops while it is 75."""

from __future__ import annotations

import argparse
import shlex
import sys
from datetime import datetime
from pathlib import Path


def default_profile() -> str:
    """The lab's embedded default: the GPU lab where CUDA is, the CPU lab elsewhere."""
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("run", help="run experiments and write DIR/results.json")
    p.add_argument("--profile", help="smoke, cpu or gpu (default: gpu with CUDA, else cpu)")
    p.add_argument("--only", help="comma-separated experiment ids (see `list`)")
    p.add_argument("--out", type=Path, help="run directory (default: runs/<profile>-<timestamp>)")
    p.add_argument("--weights", help="local GPT-2 checkpoint folder, or 'random' (default: cache or random)")
    p.add_argument("--label", help="a name for this run or host, shown by the report and compare (manifest 'label')")
    again = p.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true",
                       help="DIR holds an unfinished run: keep its OK records and run the other experiments again")
    again.add_argument("--force", action="store_true",
                       help="DIR holds a run: move it aside to DIR.old-<time> (nothing is deleted) and start afresh")
    p.add_argument("--allow-source-change", action="store_true",
                   help="with --resume: resume although the lab's source changed since the run started (the change is "
                        "recorded in the run's starts)")
    p.add_argument("--set", action="append", default=[], metavar="EXP.KEY=VALUE",
                   help="override an experiment option, e.g. cuda_graph_decode.max_autotune=true (repeatable; "
                        "`list --options` shows them)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show library output (torch's warnings and log records, profiler lines) as it comes; "
                        "it is recorded in each experiment's results either way")
    p.add_argument("--strict", action="store_true",
                   help="exit with status 1 when an experiment FAILED or any check failed (default: 0)")
    p.add_argument("--stop-after", metavar="SECONDS",
                   help="a run in chunks: between experiments, stop before one expected to end more than SECONDS "
                        "after the command started, and exit with status 75; the last line is the command that "
                        "continues (--resume, same options). Expected: what it took in an earlier start of this "
                        "run, else unknown (the lab declares no durations: they depend on the host, options and "
                        "caches), so no experiment starts once SECONDS have passed: choose SECONDS as the host's "
                        "limit minus the longest experiment (docs/results.md, 'A run in chunks')")
    return p


def continue_command(args: argparse.Namespace, profile: str, out: Path) -> str:
    """The command that continues a run stopped at its budget: this one as --resume (never --force)."""
    words = [sys.executable, "-m", "lab", "run", "--profile", profile, "--out", str(out), "--resume"]
    for flag, value in (("--only", args.only), ("--weights", args.weights), ("--label", args.label),
                        ("--stop-after", args.stop_after)):
        if value is not None:
            words += [flag, value]
    for item in args.set:
        words += ["--set", item]
    for flag, on in (("--allow-source-change", args.allow_source_change), ("-v", args.verbose),
                     ("--strict", args.strict)):
        if on:
            words.append(flag)
    return shlex.join(words)


def main(args: argparse.Namespace) -> int:
    from lab.run import budget as run_budget

    started = run_budget.now()  # the budget counts from here, before torch is imported
    from lab.host import cpuplace

    cpuplace.bind_from_env()  # LAB_CPU_BIND, before torch starts a thread (threads and children inherit it)
    from lab import console
    from lab.contract import profiles
    from lab.run import runner
    from lab.contract.catalogue import resolve
    from lab.contract.options import parse_set

    if args.label:
        import os

        from lab.run.manifest import LABEL_ENV

        os.environ[LABEL_ENV] = args.label  # lab.run.manifest.collect records it
    profile = profiles.get(args.profile or default_profile())
    set_text = parse_set(args.set)
    only = None
    if args.only is not None:
        only = [s.strip() for s in args.only.split(",") if s.strip()]
        if not only:
            raise ValueError(f"--only {args.only!r}: names no experiment (ids separated by commas; `python -m lab "
                             "list` prints them; leave --only out to run the whole profile)")
        resolve(only)
    if args.resume and args.out is None:
        raise ValueError("--resume: give the run directory to resume with --out DIR")
    if args.allow_source_change and not args.resume:
        raise ValueError("--allow-source-change: only a --resume can mix versions of the lab's source; add --resume")
    budget = run_budget.Budget(run_budget.parse_seconds(args.stop_after), started) \
        if args.stop_after is not None else None
    out = args.out or Path("runs") / f"{profile.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    results = runner.run(profile, out, only=only, weights=args.weights, argv=sys.argv, set_text=set_text,
                         resume=args.resume, force=args.force, verbose=args.verbose,
                         allow_source_change=args.allow_source_change, stop_after=budget)
    print(console.final_line(results, out / "results.json"))
    stop = results.run.starts[-1].stop if results.run.starts else None
    if results.run.state == "stopped" and stop is not None:
        print(f"stopped at --stop-after {stop.budget_s:g} with {len(stop.not_started)} experiment(s) not started; "
              f"continue with: {continue_command(args, profile.name, out)}")
        return run_budget.EXIT_STOPPED
    return 1 if args.strict and console.strict_failure(results) else 0
