"""`python -m lab run --profile NAME [--only ID,...] [--out DIR] [--set EXP.KEY=VALUE] [--resume
[--allow-source-change] | --force] [-v] [--strict]`: run experiments, write DIR/results.json.

DIR is owned by one run at a time; a DIR that already holds a run is refused unless --resume (keep its
OK records, run the rest) or --force (move it aside to DIR.old-<time>) says what to do with it. A resume
measures what the first start measured: another resolved profile, other weights or (without
--allow-source-change) another lab source is refused.
The run talks on stderr (lab.console); its last line, on stdout, names the results file with the counts,
the NOT_RUN codes and the failed checks. The exit status is 0 whatever the results, unless `--strict`:
then 1 when an experiment FAILED or any check failed."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path


def default_profile() -> str:
    """The lab's embedded default: the GPU lab where CUDA is, the CPU lab elsewhere."""
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
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
    return p


def main(args: argparse.Namespace) -> int:
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
    out = args.out or Path("runs") / f"{profile.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    results = runner.run(profile, out, only=only, weights=args.weights, argv=sys.argv, set_text=set_text,
                         resume=args.resume, force=args.force, verbose=args.verbose,
                         allow_source_change=args.allow_source_change)
    print(console.final_line(results, out / "results.json"))
    return 1 if args.strict and console.strict_failure(results) else 0
