"""`python -m lab inductor-probe [--out FILE]`: compile one small function with Inductor (run inside an image)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("inductor-probe", help="compile a tiny function with Inductor on the CPU and say what happened")
    p.add_argument("--out", type=Path, help="also write the outcome as JSON")
    return p


def main(args: argparse.Namespace) -> int:
    from lab.atomic import write_json_atomic
    from lab.containers.probe import inductor_probe

    result = inductor_probe()
    print(json.dumps(result))
    if args.out:
        write_json_atomic(args.out, result)
    return 0
