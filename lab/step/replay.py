"""A function captured by hand into a CUDA graph: the manual recipe, as one small class.

Static input buffers are allocated once; lab.step.capture warms up on a side stream (lazy
initialisation, cuBLAS handles, allocator growth happen there, not in the capture) and records the
calls against those fixed addresses; replay copies new values into the static inputs only after
every argument has been checked, because a `copy_` would silently broadcast a wrong shape or convert
a wrong dtype, and a partial copy before a rejection would leave the buffers half-written.

The output buffer is overwritten by the next replay: `__call__` returns a clone unless asked not to.
`check_like` is pure and runs anywhere (the tests exercise it on the CPU).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from lab.step.capture import capture


def check_like(args: Sequence[Any], static: Sequence[torch.Tensor]) -> None:
    """Raise ValueError naming the first argument whose count, shape, dtype or device differs from the capture's."""
    if len(args) != len(static):
        raise ValueError(f"expected {len(static)} tensor argument(s) as captured, got {len(args)}")
    for i, (a, s) in enumerate(zip(args, static)):
        if not isinstance(a, torch.Tensor):
            raise ValueError(f"argument {i}: expected a tensor, got {type(a).__name__}")
        for what, got, want in (("shape", tuple(a.shape), tuple(s.shape)), ("dtype", a.dtype, s.dtype),
                                ("device", a.device, s.device)):
            if got != want:
                raise ValueError(f"argument {i}: {what} {got} does not match the captured {what} {want}")


def _clone(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, (tuple, list)):
        return type(out)(_clone(o) for o in out)
    return out


class StaticGraph:
    """`fn(*example_args)` captured once; call it with same-shaped tensors to replay."""

    def __init__(self, fn: Callable[..., Any], example_args: Sequence[torch.Tensor], warmup: int = 3,
                 capture_error_mode: str | None = None) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("StaticGraph needs a CUDA device")
        self.static_in = [a.detach().clone() for a in example_args]
        captured = capture(fn, *self.static_in, warmup=warmup, capture_error_mode=capture_error_mode)
        self.graph = captured.graph
        self.static_out = captured.output
        self.setup_s = captured.setup_s  # warm-up + capture, seconds
        self.pool_bytes = captured.pool_bytes

    def replay(self) -> Any:
        """Replay on whatever the static inputs hold now; returns the static output (not a copy)."""
        self.graph.replay()
        return self.static_out

    def __call__(self, *args: torch.Tensor, clone: bool = True) -> Any:
        check_like(args, self.static_in)  # all of them before copying any
        with torch.no_grad():
            for dst, src in zip(self.static_in, args):
                dst.copy_(src)
            self.graph.replay()
        return _clone(self.static_out) if clone else self.static_out
