"""The host's own ceilings (launch, memory bandwidth, compute) and the bounds they put on a decode step.

A step's time is at least the largest of three bounds:
- launch:    kernels per step x the cost of issuing one (an eager op, or a node of a replayed graph);
- bandwidth: bytes the step must read (weights once, the K and V it attends: decode_bytes) / measured copy bandwidth;
- compute:   FLOPs per step / measured matmul peak for the dtype.
The measured step divided by the largest bound says how far from this host's limits a method is.
The ceilings are measured in the same run, on the same device; nothing is taken from a datasheet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from lab.step.capture import capture
from lab.step.model import Weights
from lab.measure.timing import Clock, clock_for, time_calls


# ---------------------------------------------------------------------------- step arithmetic

def step_bytes(w: Weights, batch: int, slots: float) -> int:
    """Bytes one step must read: every weight once (the position table: one row per sequence; the token table is read
    whole by the tied lm_head) and the K and V of the `slots` cache slots it attends (`decode_bytes`: their mean)."""
    elem = w.wte.element_size()
    weights = w.nbytes() - w.wpe.numel() * w.wpe.element_size() + batch * w.n_embd * elem
    cache = 2 * w.n_layer * batch * slots * w.n_embd * elem
    return int(round(weights + cache))


def decode_bytes(w: Weights, batch: int, prompt_len: int, steps: int) -> int:
    """bytes_per_step, MBU's numerator, the lab's one count: `step_bytes` at the slots a step attends in the timed decode."""
    return step_bytes(w, batch, attended_slots(prompt_len, steps))


def mbu(nbytes: int, step_ms: float, bandwidth_gbps: float) -> float:
    """The lab's one MBU, as stored: `decode_bytes` / the step's own median time / the copy bandwidth."""
    return round(nbytes / (step_ms / 1e3) / 1e9 / bandwidth_gbps, 4)


def step_flops(w: Weights, batch: int, slots: float) -> int:
    """Multiply-adds x 2 of one step: the four projections per layer, the lm_head, attention over `slots`."""
    E, V, L = w.n_embd, int(w.wte.shape[0]), w.n_layer
    per_token_matmul = L * (E * 3 * E + E * E + E * 4 * E + 4 * E * E) + V * E
    attention = L * 2 * slots * E  # q.k over the attended slots and att @ v, all heads
    return int(round(2 * batch * (per_token_matmul + attention)))


def attended_slots(prompt_len: int, steps: int) -> float:
    """Cache slots a step attends, averaged over `steps` steps after a `prompt_len`-token prefill: the
    step at position p reads slots 0..p, and p runs from prompt_len to prompt_len + steps - 1."""
    return prompt_len + (steps - 1) / 2 + 1


@dataclass(frozen=True)
class Bounds:
    launch_ms: float
    bandwidth_ms: float
    compute_ms: float

    @property
    def bound_ms(self) -> float:
        return max(self.launch_ms, self.bandwidth_ms, self.compute_ms)

    @property
    def binding(self) -> str:
        values = {"launch": self.launch_ms, "bandwidth": self.bandwidth_ms, "compute": self.compute_ms}
        return max(values, key=values.__getitem__)


def bounds(kernels: int, per_kernel_us: float, nbytes: int, bandwidth_gbps: float, flops: int,
           peak_tflops: float) -> Bounds:
    if bandwidth_gbps <= 0 or peak_tflops <= 0 or per_kernel_us < 0:
        raise ValueError("ceilings must be positive")
    return Bounds(launch_ms=kernels * per_kernel_us / 1e3,
                  bandwidth_ms=nbytes / (bandwidth_gbps * 1e9) * 1e3,
                  compute_ms=flops / (peak_tflops * 1e12) * 1e3)


# ---------------------------------------------------------------------------- measurements
# Each returns one sample per repeat (all kept; the experiment takes the best as the ceiling), timed
# with the run's clock: CUDA events on the GPU, the host clock on the CPU (lab.measure.timing).

def _tiny_ops(device: torch.device, ops: int) -> Callable[[], None]:
    """`ops` in-place adds on one element: kernels whose arithmetic costs nothing."""
    x = torch.zeros(1, device=device)

    def tiny_ops() -> None:
        for _ in range(ops):
            x.add_(1.0)

    return tiny_ops


def launch_us_eager(device: torch.device, ops: int = 2000, repeats: int = 5,
                    clock: Clock | None = None) -> list[float]:
    """Microseconds per tiny eager op (an in-place add on one element): the host's issue rate."""
    ms = time_calls(_tiny_ops(device, ops), repeats, clock or clock_for(device), warmup=1)
    return [m * 1e3 / ops for m in ms]


def launch_us_graph_node(device: torch.device, ops: int = 1000, repeats: int = 5,
                         clock: Clock | None = None) -> list[float]:
    """Microseconds per node of a replayed CUDA graph of `ops` tiny ops (CUDA only)."""
    graph = capture(_tiny_ops(device, ops), warmup=1)
    ms = time_calls(graph.replay, repeats, clock or clock_for(device), warmup=1)
    return [m * 1e3 / ops for m in ms]


def copy_bandwidth_gbps(device: torch.device, nbytes: int, repeats: int = 10,
                        clock: Clock | None = None) -> list[float]:
    """Device copy rate, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    ms = time_calls(lambda: dst.copy_(src), repeats, clock or clock_for(device), warmup=1)
    return [2 * src.numel() * 4 / (m / 1e3) / 1e9 for m in ms]


def matmul_tflops(device: torch.device, dtype: torch.dtype, n: int, repeats: int = 5,
                  clock: Clock | None = None) -> list[float]:
    """Throughput of an n x n x n matmul on random data."""
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    ms = time_calls(lambda: a @ b, repeats, clock or clock_for(device), warmup=2)
    return [2 * n ** 3 / (m / 1e3) / 1e12 for m in ms]
