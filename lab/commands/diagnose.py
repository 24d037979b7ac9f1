"""`python -m lab diagnose TARGET`: the five checks on your own function, and a verdict.

TARGET is `module:function`; the function returns `(callable, example_inputs)` (see docs/diagnose.md).
"""

from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("diagnose", help="why compiling did (not) help: the five checks and a verdict")
    p.add_argument("target", metavar="TARGET",
                   help="module:function returning (callable, example_inputs), e.g. lab.examples.targets:gemm_stack")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where to run (auto: cuda when available)")
    p.add_argument("--no-compile", action="store_true", help="skip Inductor (checks 2 and the compiled timing)")
    p.add_argument("--rounds", type=int, default=3, help="timing rounds, methods in rotating order")
    p.add_argument("--iters", type=int, default=10, help="timed calls per round and method")
    p.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    return p


def main(args: argparse.Namespace) -> int:
    import torch

    from lab.diagnose import diagnose, load_target
    from lab.toolchain import probe

    if args.rounds < 1 or args.iters < 1:
        raise ValueError(f"--rounds {args.rounds} --iters {args.iters}: both must be at least 1")
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device visible to torch (use --device cpu)")
    fn, inputs = load_target(args.target, device)
    reason = None if args.no_compile else probe().reason_for("inductor", device)
    d = diagnose(fn, inputs, device, target=args.target, compile=not args.no_compile,
                 inductor_reason=f"{reason.code}: {reason.message}" if reason else None,
                 rounds=args.rounds, iters=args.iters)
    print(json.dumps(d.as_dict(), indent=1, default=str) if args.json else d.render())
    return 0
