"""`python -m lab compare A B [--json]`: manifest fields that differ, why it moved (ranked for each class of
figure that moved: report/pages/why_moved.py), and every shared result with ratio, mark and reason."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("compare", help="compare two runs (or manifests): environment differences and result ratios")
    p.add_argument("a", type=Path, help="A (before, the baseline): a run directory, results.json or manifest.json")
    p.add_argument("b", type=Path, help="B (after): a run directory, results.json or manifest.json")
    p.add_argument("--factor", type=float, default=None,
                   help="where either value has no stored 95%% interval, the ratio beyond which a change counts as "
                        "better/worse (default 1.10); values with intervals on both sides are judged by them")
    p.add_argument("--only-changed", action="store_true", help="leave out metrics marked same")
    p.add_argument("--json", action="store_true",
                   help="print machine-readable records (experiment, metric, params, a, b, ratio, mark, reason)")
    return p


def main(args: argparse.Namespace) -> int:
    from report.pages.compare import FACTOR, compare, load_side
    from lab.untrusted import safe
    from report.pages.compare_text import format_text, to_json
    from lab.contract.results import ResultsError

    factor = FACTOR if args.factor is None else args.factor
    if not factor >= 1:
        raise ValueError(f"--factor {factor}: must be at least 1")
    try:
        sides = load_side(args.a), load_side(args.b)
    except ResultsError as exc:  # one line, with nothing from the file that could drive the terminal
        raise ValueError(safe(" ".join(str(exc).split()))) from None
    try:
        same = os.path.samefile(sides[0].path, sides[1].path)
    except OSError:
        same = False
    if same:
        print(f"note: A and B are the same file ({safe(str(sides[0].path))}): every figure compares with itself",
              file=sys.stderr)
    result = compare(*sides, factor)
    if args.only_changed:
        result.metrics = [r for r in result.metrics if r.mark != "same"]
    print(to_json(result) if args.json else format_text(result), end="")
    return 0
