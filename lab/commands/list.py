"""`python -m lab list`: every experiment id, one line each, with its prerequisites; `--options` its knobs.

`--check [PROFILE]` (default: the profile `run` picks on this host) says of each experiment the profile runs
whether it would run here, judging exactly the prerequisites the runner judges (`runner.needs_for`: the
catalogue's needs, plus `cuda` for everything but host experiments in a CUDA profile, which the needs
column then shows); one the profile does not run is shown as not in it. It ends with how many of the
profile's experiments would run here, and one line per reason saying what would make the NOT_RUN ones run.
"""

from __future__ import annotations

import argparse
import enum
from typing import Any


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("list", help="list every experiment id with its prerequisites (or, with --options, its knobs)")
    p.add_argument("--check", nargs="?", const="", metavar="PROFILE",
                   help="also say whether each would run on this host under PROFILE (default: the profile `run` "
                        "picks here: gpu with CUDA, else cpu), and what would make the others run")
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
    from lab.contract import profiles
    from lab.contract.catalogue import CATALOGUE, resolve
    from lab.commands.run import default_profile
    from lab.contract.options import describe
    from lab.run.context import options_class

    profile = profiles.get(profile_name or default_profile())
    for spec in resolve([experiment]) if experiment else CATALOGUE:  # every experiment's, those run by name too
        infos = describe(options_class(spec))
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


def check(profile_name: str) -> list[str]:
    """The catalogue under `profile_name` on this host: one line per experiment, then what makes NOT_RUN ones run."""
    from lab.contract import profiles
    from lab.contract.catalogue import CATALOGUE, resolve
    from lab.commands.run import default_profile
    from lab.run.runner import needs_for, prerequisite_reason
    from lab.host.toolchain import probe

    profile, tc = profiles.get(profile_name or default_profile()), probe()
    selected = {s.id for s in resolve(list(profile.experiments) if profile.experiments else None,
                                      sweeps=profile.sweeps)}  # what `lab run --profile` runs (lab.run.runner)
    rows: list[tuple[str, str, str, str]] = []
    blocked: dict[tuple[str, str], list[str]] = {}
    added = False
    for spec in CATALOGUE:
        needs = needs_for(spec, profile)
        shown = ",".join(n + ("*" if n not in spec.needs else "") for n in needs) or "-"
        added |= any(n not in spec.needs for n in needs)
        reason = prerequisite_reason(spec, profile, tc)
        if spec.id not in selected:
            verdict = f"not in profile {profile.name}"
        elif reason is None:
            verdict = "runs here"
        else:
            verdict = f"NOT_RUN {reason.code}"
            blocked.setdefault((str(reason.code), reason.message), []).append(spec.id)
        rows.append((spec.id, shown, spec.title, verdict))
    width, nwidth = (max(len(r[column]) for r in rows) for column in (0, 1))
    out = [f"profile {profile.name} (device {profile.device}) on this host:"]
    out += [f"{eid:<{width}}  needs={needs:<{nwidth}}  {title}  [{verdict}]" for eid, needs, title, verdict in rows]
    if added:
        out.append(f"* the {profile.name} profile runs on CUDA: every experiment but the host ones needs a CUDA device")
    runs = sum(r[3] == "runs here" for r in rows)
    outside = len(rows) - len(selected)
    out.append(f"{runs} of the profile's {len(selected)} would run here"
               + (f" ({outside} more not in profile {profile.name})" if outside else ""))
    return out + [f"{len(ids)} NOT_RUN {code}: {message}" for (code, message), ids in blocked.items()]


def main(args: argparse.Namespace) -> int:
    from lab.contract.catalogue import CATALOGUE

    if args.options is not None:
        print_options(args.options or None, args.profile)
        return 0
    if args.profile:
        raise ValueError("--profile only goes with --options (for the prerequisites, use --check PROFILE)")
    if args.check is not None:
        print("\n".join(check(args.check)))
        return 0
    width = max(len(s.id) for s in CATALOGUE)
    for spec in CATALOGUE:
        needs = ",".join(spec.needs) or "-"
        print(f"{spec.id:<{width}}  needs={needs:<9} {spec.title}")
    return 0
