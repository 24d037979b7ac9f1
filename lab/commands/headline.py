"""`python -m lab headline RUN [RUN ...] [--write README.md | --check README.md]`: the README's headline tables.

Made from a run's results.json (see report/pages/headline.py for the tables and the markers): printed, written
between the README's `headline` markers, or checked against the runs the markers name. `--check` takes the
runs from the marker; RUN with it, as the README writes it, asks whether the tables are those of RUN: the
runs the marker names must then be RUN (the same folders or results.json files), else the check fails.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> argparse.ArgumentParser:
    p = sub.add_parser("headline", help="the README's headline tables from a run (print, --write or --check)")
    p.add_argument("runs", nargs="*", help="run directories or results.json files (merged in order)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--write", type=Path, metavar="README", help="replace the block between the headline markers")
    what.add_argument("--check", type=Path, metavar="README",
                      help="exit 1 when the block differs from the tables of the runs its marker names (and, "
                           "with RUN, when those are not RUN)")
    return p


def _run_dir(path: Path) -> Path:
    """A run named by its folder or its results.json, as one path to compare."""
    path = path.resolve()
    return path.parent if path.name == "results.json" else path


def _check(readme: Path, runs: list[str]) -> int:
    from report.pages import headline

    same, named = headline.check(readme)
    if runs:
        marker = [_run_dir(readme.parent / r) for r in named.split()]
        if marker != [_run_dir(Path(r)) for r in runs]:
            print(f"{readme}: headline tables are of {named} (its marker), not of {' '.join(runs)}: remake them "
                  f"with `python -m lab headline {' '.join(runs)} --write {readme}`", file=sys.stderr)
            return 1
    print(f"{readme}: headline tables {'match' if same else 'differ from'} {named}"
          + ("" if same else f": remake them with `python -m lab headline {named} --write {readme}`"),
          file=sys.stdout if same else sys.stderr)
    return 0 if same else 1


def main(args: argparse.Namespace) -> int:
    from report.pages import headline
    from lab.contract.results import ResultsError

    try:
        if args.check:
            return _check(args.check, list(args.runs))
        if not args.runs:
            raise ValueError("name at least one run directory or results.json (or --check README)")
        if args.write:
            changed = headline.write(args.write, args.runs, root=Path.cwd())
            print(f"{args.write}: headline tables {'rewritten' if changed else 'unchanged'} from {' '.join(args.runs)}")
            return 0
        print(headline.render(args.runs), end="")
        return 0
    except ResultsError as exc:
        raise ValueError(str(exc)) from None
