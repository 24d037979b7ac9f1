"""`python -m lab diagnose TARGET`: the five checks on your own function, and a verdict.

TARGET is `module:function`; the function returns `(callable, example_inputs)` (see docs/diagnose.md).
Every mistake in the target is one line naming it and exit status 2: a function that needs
arguments, a wrong return value, a callable whose result holds no tensor, the target's own code
raising (the line of its code that raised is named) or calling sys.exit.

The target runs in a child process (lab.run.childproc), in the current directory and importing from
where this process imports: a target that never
returns is stopped after `--timeout` seconds (one line, exit 2), Ctrl-C stops it at once, and what
the libraries print there (the profiler's lines) stays off the console (`--json` carries it).
A thread could not do this: Python cannot stop a thread stuck in a sleep or a C call.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import traceback
from typing import Any, Callable, TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 600.0  # the five checks of the examples take seconds; a compile of a large model minutes


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("diagnose", help="why compiling did (not) help: the five checks and a verdict")
    p.add_argument("target", metavar="TARGET",
                   help="module:function returning (callable, example_inputs), e.g. lab.examples.targets:gemm_stack")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where to run (auto: cuda when available)")
    p.add_argument("--no-compile", action="store_true", help="skip Inductor (checks 2 and the compiled timing)")
    p.add_argument("--rounds", type=int, default=3, help="timing rounds, methods in rotating order")
    p.add_argument("--iters", type=int, default=10, help="timed calls per round and method")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"stop the target after this many seconds (default {DEFAULT_TIMEOUT_S:.0f})")
    p.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    return p


def main(args: argparse.Namespace) -> int:
    import torch

    from lab.host.toolchain import probe
    from lab.run.childproc import run_child

    if args.rounds < 1 or args.iters < 1:
        raise ValueError(f"--rounds {args.rounds} --iters {args.iters}: both must be at least 1")
    if not args.timeout > 0:
        raise ValueError(f"--timeout {args.timeout:g}: must be a positive number of seconds")
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device visible to torch (use --device cpu)")
    reason = None if args.no_compile else probe().reason_for("inductor", device)
    kwargs = {"target": args.target, "device": device, "compile": not args.no_compile,
              "inductor_reason": f"{reason.code}: {reason.message}" if reason else None,
              "rounds": args.rounds, "iters": args.iters}
    try:
        child = run_child("lab.commands.diagnose:in_child", kwargs, timeout_s=args.timeout, cwd=os.getcwd(),
                          env={"PYTHONPATH": os.pathsep.join([os.getcwd()] + [p for p in sys.path if p])})
    except KeyboardInterrupt:
        print(f"interrupted: the target {args.target} was stopped (diagnose keeps no results: nothing is lost)",
              file=sys.stderr)
        return 130
    if child.timed_out:
        raise ValueError(f"TARGET {args.target}: no diagnosis after --timeout {args.timeout:g} s: the target was "
                         f"stopped (does it wait forever or loop? a slow but finite one needs a larger --timeout)")
    value = child.value
    if not isinstance(value, dict):
        if "Traceback" in child.stderr_tail:  # an error of the lab in the child: its traceback, then the bug line
            sys.stderr.write(child.stderr_tail)
            raise RuntimeError(f"the diagnosis process failed ({child.describe()})")
        raise ValueError(f"TARGET {args.target}: the process running it ended before the diagnosis "
                         f"({child.describe()}): does the target exit the process (os._exit) or crash it?")
    if "error" in value:
        raise ValueError(value["error"])
    if args.json:
        lines = [ln for ln in child.stderr_tail.splitlines() if ln.strip()]  # what the libraries printed there
        print(json.dumps({**value["diagnosis"], "library_output": lines}, indent=1))
    else:
        print(value["text"])
    return 0


def in_child(target: str, device: str, compile: bool, inductor_reason: str | None, rounds: int,
             iters: int) -> dict[str, Any]:
    """In the child process: {"text", "diagnosis"} of the target, or {"error": one line} for a mistake in it."""
    from lab.measure.diagnose import diagnose, load_target

    try:
        fn, inputs = blamed(target, "building the workload", lambda: load_target(target, device))
        d = blamed(target, "running the workload",
                   lambda: diagnose(fn, inputs, device, target=target, compile=compile,
                                    inductor_reason=inductor_reason, rounds=rounds, iters=iters), fn)
    except ValueError as exc:
        return {"error": str(exc)}
    sys.stderr.flush()
    return {"text": d.render(), "diagnosis": json.loads(json.dumps(d.as_dict(), default=str))}


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
    """`call()`; an exception raised inside the target's own code, or its sys.exit, becomes one line naming the
    target and where (ValueError); anything else propagates (a bug of the lab shows its traceback)."""
    try:
        return call()
    except SystemExit as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
        raise ValueError(f"TARGET {target}: {doing} called sys.exit({exc.code!r}){where}: a target returns or "
                         f"raises, it does not exit the process") from None
    except Exception as exc:
        files = _files(target, fn)
        frames = traceback.StackSummary.from_list([f for f in traceback.extract_tb(exc.__traceback__)
                                                   if f.filename in files])
        if not frames:
            raise
        where = f"{frames[-1].filename}:{frames[-1].lineno}"
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ValueError(f"TARGET {target}: {doing} raised {type(exc).__name__}: {first} (at {where})") from None
