"""`python -m lab list`: every experiment id, one line each, with its prerequisites."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("list", help="list every experiment id with its prerequisites")
    p.add_argument("--check", metavar="PROFILE", help="also say whether each would run here under PROFILE")
    return p


def main(args: argparse.Namespace) -> int:
    from lab.catalogue import CATALOGUE

    reasons: dict[str, str] = {}
    if args.check:
        from lab import profiles
        from lab.runner import prerequisite_reason
        from lab.toolchain import probe

        profile, tc = profiles.get(args.check), probe()
        for spec in CATALOGUE:
            r = prerequisite_reason(spec, profile, tc)
            reasons[spec.id] = "runs here" if r is None else f"NOT_RUN {r.code}"
    width = max(len(s.id) for s in CATALOGUE)
    for spec in CATALOGUE:
        needs = ",".join(spec.needs) or "-"
        extra = f"  [{reasons[spec.id]}]" if reasons else ""
        print(f"{spec.id:<{width}}  needs={needs:<9} {spec.title}{extra}")
    return 0
