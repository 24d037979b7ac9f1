"""`python -m lab diagnose TARGET`: the five checks on your own function, and a verdict.

TARGET is `module:function`; the function returns `(callable, example_inputs)` (see docs/diagnose.md).
When the target's own code raises (the function, or the callable it returned), that is one line
naming the target, the error and the line of the target's code that raised; exit status 2.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import traceback
from typing import Any, Callable, TypeVar

T = TypeVar("T")


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

    from lab.measure.diagnose import diagnose, load_target
    from lab.host.toolchain import probe

    if args.rounds < 1 or args.iters < 1:
        raise ValueError(f"--rounds {args.rounds} --iters {args.iters}: both must be at least 1")
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device visible to torch (use --device cpu)")
    fn, inputs = blamed(args.target, "building the workload", lambda: load_target(args.target, device))
    reason = None if args.no_compile else probe().reason_for("inductor", device)
    d = blamed(args.target, "running the workload",
               lambda: diagnose(fn, inputs, device, target=args.target, compile=not args.no_compile,
                                inductor_reason=f"{reason.code}: {reason.message}" if reason else None,
                                rounds=args.rounds, iters=args.iters), fn)
    print(json.dumps(d.as_dict(), indent=1, default=str) if args.json else d.render())
    return 0


def _files(target: str, fn: Any = None) -> set[str]:
    """The source files of the target's module and of the callable it returned."""
    files = set()
    module = sys.modules.get(target.partition(":")[0])
    for obj in (module, fn, getattr(fn, "forward", None), type(fn) if fn is not None else None):
        try:
            files.add(inspect.getsourcefile(obj) or "")  # type: ignore[arg-type]
        except TypeError:
            continue
    return files - {""}


def blamed(target: str, doing: str, call: Callable[[], T], fn: Any = None) -> T:
    """`call()`; an exception raised inside the target's own code becomes one line naming the target and where
    (ValueError); anything else propagates (a bug of the lab shows its traceback)."""
    try:
        return call()
    except Exception as exc:
        files = _files(target, fn)
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in files]
        if not frames:
            raise
        where = f"{frames[-1].filename}:{frames[-1].lineno}"
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ValueError(f"TARGET {target}: {doing} raised {type(exc).__name__}: {first} (at {where})") from None
