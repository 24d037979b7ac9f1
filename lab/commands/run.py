"""`python -m lab run --profile NAME [--only ID,...] [--out DIR]`: run experiments, write DIR/results.json."""

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
    p.add_argument("--set", action="append", default=[], metavar="EXP.KEY=VALUE",
                   help="override an experiment option, e.g. cuda_graph_decode.max_autotune=true (repeatable)")
    return p


def parse_set(values: list[str]) -> dict[str, dict[str, object]]:
    import json

    out: dict[str, dict[str, object]] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        exp, dot, name = key.partition(".")
        if not sep or not dot or not exp or not name:
            raise ValueError(f"--set {item!r}: expected EXPERIMENT.KEY=VALUE")
        try:
            value: object = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out.setdefault(exp, {})[name] = value
    return out


def main(args: argparse.Namespace) -> int:
    from lab import profiles, runner
    from lab.catalogue import resolve

    profile = profiles.get(args.profile or default_profile())
    for exp, values in parse_set(args.set).items():
        resolve([exp])  # unknown ids are an error naming them
        profile = profile.with_options(exp, **values)
    only = [s.strip() for s in args.only.split(",") if s.strip()] if args.only else None
    if only:
        resolve(only)
    out = args.out or Path("runs") / f"{profile.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    results = runner.run(profile, out, only=only, weights=args.weights, argv=sys.argv)
    counts = {s: sum(r.status == s for r in results.experiments) for s in ("OK", "NOT_RUN", "FAILED")}
    print(f"{out / 'results.json'}: {counts['OK']} OK, {counts['NOT_RUN']} NOT_RUN, {counts['FAILED']} FAILED "
          f"in {results.run.wall_s:.1f} s")
    return 0
