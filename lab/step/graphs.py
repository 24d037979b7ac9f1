"""CUDA graph capture and replay of the fixed-shape decode step.

`GraphedStep` records one call of a step function over a `DecodeState` (with lab.step.capture's
recipe) and replays it. Warm-up (on a side stream, so lazy initialisation and allocator growth
stay out of the capture) and capture both execute the step: they advance the position and write
the cache. So every state buffer is saved first and restored afterwards, in place: without that the
first replayed token would be the fifth, which looks like a model error and is not one.

A graph does not check its own bounds: replaying past the end of the cache is an out-of-range
index on the device, which asserts and leaves the CUDA context unusable. The position lives on the
device, so the host keeps a mirror of it (it knows each replay advances it by one) and refuses to
replay past the end, with a Python error, before anything is launched.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from lab.step.capture import capture
from lab.step.decode import DecodeState
from lab.step.model import Weights

StepFn = Callable[[DecodeState, Weights], torch.Tensor]


class CacheFullError(IndexError):
    """Raised on the host before a replay that would write past the end of the cache."""


class GraphedStep:
    """One captured call of `step(state, weights)`, replayed on the same buffers."""

    def __init__(self, step: StepFn, state: DecodeState, weights: Weights, warmup: int = 3,
                 pool: Any = None) -> None:
        if state.tok.device.type != "cuda":
            raise ValueError("GraphedStep needs the state on a CUDA device")
        self.state = state
        self.weights = weights
        self.max_len = state.max_len
        saved = state.snapshot()
        captured = capture(step, state, weights, warmup=warmup, pool=pool)
        self.graph = captured.graph
        self.logits: torch.Tensor = captured.output  # the graph's output buffer
        self.warmup_s = captured.warmup_s
        self.capture_only_s = captured.capture_s
        self.capture_s = captured.setup_s  # warm-up + capture
        self.pool_bytes = captured.pool_bytes
        state.restore(saved)
        torch.cuda.synchronize()
        self._pos = int(state.pos.item())  # host mirror of the device position (one sync, here)

    @property
    def position(self) -> int:
        return self._pos

    def sync_position(self) -> None:
        """Re-read the device position (after a prefill or any write to state.pos outside replay)."""
        self._pos = int(self.state.pos.item())

    def replay(self) -> torch.Tensor:
        """Replay one step; raises CacheFullError instead of letting the device assert."""
        # The step writes the cache at pos and the output at pos + 1: both must be inside max_len.
        if self._pos + 1 >= self.max_len:
            raise CacheFullError(f"position {self._pos}: the next step would write slot {self._pos + 1} "
                                 f"of a {self.max_len}-slot cache; start a new sequence or capture a longer cache")
        self.graph.replay()
        self._pos += 1
        return self.logits

    __call__ = replay

    def replay_unchecked(self) -> None:
        """Replay with no host-side bounds check (for the hazard experiment only)."""
        self.graph.replay()
        self._pos += 1
