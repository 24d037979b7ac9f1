"""`python -m lab headline RUN [RUN ...] [--view compile] [--write README.md | --check README.md]`: the README's
headline tables.

Made from a run's results.json (see report/pages/headline.py for the views, their tables and the markers): printed,
written between the README's `headline` markers of one view (`--view`, default: the default view), or checked:
`--check` compares every block of the README with the runs its marker names. RUN with `--check`, as the README
writes it, asks whether the tables of `--view`'s block are those of RUN: the runs that block's marker names must
then be RUN (the same folders or results.json files), else the check fails.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> argparse.ArgumentParser:
    p = sub.add_parser("headline", help="the README's headline tables from a run (print, --write or --check)")
    p.add_argument("runs", nargs="*", help="run directories or results.json files (merged in order)")
    p.add_argument("--view", default="default", metavar="NAME",
                   help="the tables to make: default (step times, the floor, MBU) or compile (compile modes against "
                        "compile+graph, compile time against depth); the block --write replaces, the block --check "
                        "compares RUN with")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--write", type=Path, metavar="README", help="replace the view's block between its headline "
                                                                   "markers (the README must have one)")
    what.add_argument("--check", type=Path, metavar="README",
                      help="exit 1 when a block differs from the tables of the runs its marker names (and, "
                           "with RUN, when the view's block does not name RUN)")
    return p


def _run_dir(path: Path) -> Path:
    """A run named by its folder or its results.json, as one path to compare."""
    path = path.resolve()
    return path.parent if path.name == "results.json" else path


def _check(readme: Path, runs: list[str], view: str) -> int:
    from report.pages import headline

    checked = headline.check_all(readme)
    if runs:
        named = headline.find_block(readme.read_text(), str(readme), view)[2]
        if [_run_dir(readme.parent / r) for r in named] != [_run_dir(Path(r)) for r in runs]:
            print(f"{readme}: {headline.label(view)} tables are of {' '.join(named)} (its marker), not of "
                  f"{' '.join(runs)}: remake them with `python -m lab headline {' '.join(runs)}"
                  f"{headline.flag(view)} --write {readme}`", file=sys.stderr)
            return 1
    for c in checked:
        print(f"{readme}: {headline.label(c.view)} tables {'match' if c.same else 'differ from'} {c.runs}"
              + ("" if c.same else f": remake them with `python -m lab headline {c.runs}{headline.flag(c.view)} --write "
                                   f"{readme}`"), file=sys.stdout if c.same else sys.stderr)
    return 0 if all(c.same for c in checked) else 1


def main(args: argparse.Namespace) -> int:
    from report.pages import headline
    from lab.contract.results import ResultsError

    try:
        headline.known_view(args.view)
        if args.check:
            return _check(args.check, list(args.runs), args.view)
        if not args.runs:
            raise ValueError("name at least one run directory or results.json (or --check README)")
        if args.write:
            changed = headline.write(args.write, args.runs, root=Path.cwd(), view=args.view)
            print(f"{args.write}: {headline.label(args.view)} tables {'rewritten' if changed else 'unchanged'} from "
                  f"{' '.join(args.runs)}")
            return 0
        print(headline.render(args.runs, view=args.view), end="")
        return 0
    except ResultsError as exc:
        raise ValueError(str(exc)) from None
