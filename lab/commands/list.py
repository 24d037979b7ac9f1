"""`python -m lab list`: every experiment id, one line each, with its prerequisites; `--options` its knobs."""

from __future__ import annotations

import argparse
import enum
from typing import Any


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("list", help="list every experiment id with its prerequisites (or, with --options, its knobs)")
    p.add_argument("--check", metavar="PROFILE", help="also say whether each would run here under PROFILE")
    p.add_argument("--options", nargs="?", const="", metavar="ID",
                   help="print each experiment's options (or ID's): type, default, the profile's value, help")
    p.add_argument("--profile", help="with --options: whose values to show (default: the one `run` picks here)")
    return p


def text(value: Any) -> str:
    """A value as `--set` would take it: lists comma-separated, booleans true/false, None as none."""
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (tuple, list)):
        return ",".join(text(v) for v in value)
    return str(value)


def print_options(experiment: str | None, profile_name: str | None) -> None:
    from lab import profiles
    from lab.catalogue import resolve
    from lab.commands.run import default_profile
    from lab.options import describe

    profile = profiles.get(profile_name or default_profile())
    for spec in resolve([experiment] if experiment else None):
        infos = describe(spec.options_class())
        print(f"{spec.id}: {spec.title}")
        if not infos:
            print("    (no options)")
            continue
        overrides = profile.options.get(spec.id, {})
        rows = [(i.name, i.type, text(i.default), text(overrides[i.name]) if i.name in overrides else "-",
                 i.help + (f" (one of: {', '.join(i.choices)})" if i.choices else "")) for i in infos]
        header = ("option", "type", "default", f"profile {profile.name}", "help")
        widths = [max(len(r[c]) for r in rows + [header]) for c in range(4)]
        for row in [header] + rows:
            print("    " + "  ".join(f"{cell:<{w}}" for cell, w in zip(row[:4], widths)) + "  " + row[4])


def main(args: argparse.Namespace) -> int:
    from lab.catalogue import CATALOGUE

    if args.options is not None:
        print_options(args.options or None, args.profile)
        return 0
    if args.profile:
        raise ValueError("--profile only goes with --options (for the prerequisites, use --check PROFILE)")
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
