"""`python -m lab fleet-report RESULTS`: which runs of a fleet landed, and one report comparing them."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("fleet-report", help="after a fleet: list which runs landed and render RESULTS/report")
    p.add_argument("results", type=Path, help="the fleet's results folder (with fleet.json)")
    return p


def main(args: argparse.Namespace) -> int:
    from lab.fleet.finish import finish

    summary = finish(args.results)
    return 0 if summary["landed"] == summary["total"] and summary["report"] else 1
