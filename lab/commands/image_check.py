"""`python -m lab image-check VARIANT [--out FILE]`: what a built image really holds and does (lab.containers.check)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    from lab.containers.variants import VARIANTS

    p = sub.add_parser("image-check", help="check a built image: packages against its lock, apt caches and sources, "
                                           "bare run, unwritable output folder, user, reference environment")
    p.add_argument("variant", choices=[n for n, v in VARIANTS.items() if v.os == "linux" and v.target != "resolve"])
    p.add_argument("--out", type=Path, help="write the facts and verdicts as JSON")
    return p


def main(args: argparse.Namespace) -> int:
    from lab.atomic import write_json_atomic
    from lab.containers.check import check_image
    from lab.containers.reference import sentence
    from lab.containers.variants import VARIANTS

    facts = check_image(VARIANTS[args.variant])
    if args.out:
        write_json_atomic(args.out, facts)
    if facts.get("environment"):
        print(sentence(facts["image"], facts["environment"]))
    for problem in facts["problems"]:
        print(f"problem: {problem}")
    verdict = "OK" if not facts["problems"] else f"{len(facts['problems'])} problem(s)"
    print(f"{facts['image']}: {verdict}" + (f" ({args.out})" if args.out else ""))
    return 1 if facts["problems"] else 0
