"""`python -m lab compare A B`: manifest fields that differ, and every shared result with ratio and mark."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("compare", help="compare two runs (or manifests): environment differences and result ratios")
    p.add_argument("a", type=Path, help="before: a run directory, results.json or manifest.json")
    p.add_argument("b", type=Path, help="after: a run directory, results.json or manifest.json")
    p.add_argument("--factor", type=float, default=None,
                   help="ratio beyond which a change counts as better/worse (default 1.10)")
    p.add_argument("--only-changed", action="store_true", help="leave out metrics marked same")
    return p


def main(args: argparse.Namespace) -> int:
    from lab.compare import FACTOR, compare, format_text, load_side

    factor = FACTOR if args.factor is None else args.factor
    if factor < 1:
        raise ValueError(f"--factor {factor}: must be at least 1")
    result = compare(load_side(args.a), load_side(args.b), factor)
    if args.only_changed:
        result.metrics = [r for r in result.metrics if r.mark != "same"]
    print(format_text(result), end="")
    return 0
