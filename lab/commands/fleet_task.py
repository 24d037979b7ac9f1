"""`python -m lab fleet-task RESULTS [--index N]`: one task of a fleet (what each Slurm array task or pod runs)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("fleet-task", help="run one target of a fleet on this node (called by the scheduler)")
    p.add_argument("results", type=Path, help="the fleet's results folder (with fleet.json)")
    p.add_argument("--index", type=int, help="the target's index (default: SLURM_ARRAY_TASK_ID / JOB_COMPLETION_INDEX)")
    return p


def main(args: argparse.Namespace) -> int:
    from lab.fleet.task import run_task

    return run_task(args.results, args.index)
