"""`python -m lab image-run --profile P [--variant V]`: the lab in its container image, or on the host saying why.

The profile runs in its image (cpu, smoke -> graph-lab:cpu; gpu -> graph-lab:cuda with --gpus all)
when a Docker engine and the image are there. Otherwise it runs on the host with this interpreter
and the reason goes into the manifest (LAB_HOST_FALLBACK), unless --require-container demands the
image (then the reason is a one-line error, exit 2).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    from lab.containers.variants import VARIANTS

    p = sub.add_parser("image-run", help="run a profile in its container image (or on the host, saying why)")
    p.add_argument("--profile", help="smoke, cpu or gpu (default: the variant's profile)")
    p.add_argument("--variant", choices=sorted(VARIANTS), help="the image to run in (default: the profile's)")
    p.add_argument("--only", help="comma-separated experiment ids (passed to `run`)")
    p.add_argument("--set", action="append", default=[], metavar="EXP.KEY=VALUE", help="passed to `run` (repeatable)")
    p.add_argument("--weights", help="local GPT-2 checkpoint folder (mounted read-only), or 'random'")
    p.add_argument("--out", type=Path, help="host folder for the run (default: runs/<profile>-<timestamp>)")
    p.add_argument("--label", help="a name for this run or host (passed to `run`)")
    again = p.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="passed to `run`: finish the unfinished run in --out")
    again.add_argument("--force", action="store_true", help="passed to `run`: move the run in --out aside first")
    p.add_argument("--stop-after", metavar="SECONDS", help="passed to `run`: stop between experiments before this")
    p.add_argument("-v", "--verbose", action="store_true", help="passed to `run`: show library output live")
    p.add_argument("--strict", action="store_true", help="passed to `run`: exit 1 when an experiment or check failed")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--host", action="store_true", help="run on the host by request")
    where.add_argument("--require-container", action="store_true",
                       help="fail (exit 2) instead of falling back to the host when the image cannot be used")
    return p


def run_args(args: argparse.Namespace, profile: str) -> list[str]:
    """The arguments of `python -m lab run` (without --out and --weights, which depend on where it runs)."""
    out = ["run", "--profile", profile]
    if args.only:
        out += ["--only", args.only]
    for item in args.set:
        out += ["--set", item]
    if args.label:
        out += ["--label", args.label]
    if args.stop_after:
        out += ["--stop-after", args.stop_after]
    out += [flag for flag, on in (("--resume", args.resume), ("--force", args.force), ("-v", args.verbose),
                                  ("--strict", args.strict)) if on]
    return out


def main(args: argparse.Namespace) -> int:
    from lab.containers.run import container_plan, host_driver_reason, run_lab
    from lab.containers.variants import VARIANTS
    from lab.contract.reasons import Code, Reason

    if args.profile is None and args.variant is None:
        raise ValueError("give --profile (smoke, cpu, gpu) or --variant")
    profile = args.profile or VARIANTS[args.variant].profile
    out = args.out or Path("runs") / f"{profile}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    lab_args = run_args(args, profile)
    if not args.host:
        variant, reason = container_plan(profile, args.variant)
    else:
        variant, reason = None, Reason(Code.HOST_REQUESTED, "--host was given: run on the host by request")
    if variant is not None:
        too_old = host_driver_reason(variant)
        if too_old is not None:  # the run still goes ahead: inside, every GPU experiment is NOT_RUN with this reason
            print(f"warning: {too_old.code}: {too_old.message}", file=sys.stderr)
        code = run_lab(variant, lab_args, out, args.weights)
        print(f"{out / 'results.json'}: the lab exited with {code} in {variant.tag}")
        return code
    assert reason is not None
    if args.require_container:
        print(f"error: {reason.code}: {reason.message}", file=sys.stderr)
        return 2
    print(f"running on the host, not in a container: {reason.code}: {reason.message}", file=sys.stderr)
    host = [sys.executable, "-m", "lab", *lab_args, "--out", str(out)]
    if args.weights:
        host += ["--weights", args.weights]
    return subprocess.run(host, env={**os.environ, "LAB_HOST_FALLBACK": f"{reason.code}: {reason.message}"}).returncode
