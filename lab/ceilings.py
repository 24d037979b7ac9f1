"""The host's own ceilings (launch, memory bandwidth, compute) and the bounds they put on a decode step.

A step's time is at least the largest of three bounds:
- launch:    kernels per step x the cost of issuing one (an eager op, or a node of a replayed graph);
- bandwidth: bytes the step must read (weights once, the whole KV buffer) / measured copy bandwidth;
- compute:   FLOPs per step / measured matmul peak for the dtype.
The measured step divided by the largest bound says how far from this host's limits a method is.
The ceilings are measured in the same run, on the same device; nothing is taken from a datasheet.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from lab.model import Weights
from lab.timing import spread


# ---------------------------------------------------------------------------- step arithmetic

def step_bytes(w: Weights, batch: int, max_len: int) -> int:
    """Bytes one fixed-shape step must read: every weight once (the position table: one row per
    sequence; the token table is read whole by the tied lm_head) and the whole K and V buffers,
    which attention reads at every position."""
    elem = w.wte.element_size()
    weights = w.nbytes() - w.wpe.numel() * w.wpe.element_size() + batch * w.n_embd * elem
    cache = 2 * w.n_layer * batch * max_len * w.n_embd * elem
    return int(weights + cache)


def step_flops(w: Weights, batch: int, max_len: int) -> int:
    """Multiply-adds x 2 of one step: the four projections per layer, the lm_head, attention over max_len."""
    E, V, L = w.n_embd, int(w.wte.shape[0]), w.n_layer
    per_token_matmul = L * (E * 3 * E + E * E + E * 4 * E + 4 * E * E) + V * E
    attention = L * 2 * max_len * E  # q.k over max_len slots and att @ v, all heads
    return int(2 * batch * (per_token_matmul + attention))


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

def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _best_of(fn: Callable[[], float], repeats: int) -> list[float]:
    return [fn() for _ in range(repeats)]


def launch_us_eager(device: torch.device, ops: int = 2000, repeats: int = 5) -> list[float]:
    """Microseconds per tiny eager op (an in-place add on one element): the host's issue rate."""
    x = torch.zeros(1, device=device)

    def once() -> float:
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(ops):
            x.add_(1.0)
        _sync(device)
        return (time.perf_counter() - t0) * 1e6 / ops

    once()
    return _best_of(once, repeats)


def launch_us_graph_node(device: torch.device, ops: int = 1000, repeats: int = 5) -> list[float]:
    """Microseconds per node of a replayed CUDA graph of tiny ops (CUDA only)."""
    x = torch.zeros(1, device=device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            x.add_(1.0)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(ops):
            x.add_(1.0)
    g.replay()
    torch.cuda.synchronize()

    def once() -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / ops

    return _best_of(once, repeats)


def copy_bandwidth_gbps(device: torch.device, nbytes: int, repeats: int = 10) -> list[float]:
    """Device copy rate, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    dst.copy_(src)

    def once() -> float:
        _sync(device)
        t0 = time.perf_counter()
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            dst.copy_(src)
            seconds = time.perf_counter() - t0
        return 2 * src.numel() * 4 / seconds / 1e9

    return _best_of(once, repeats)


def matmul_tflops(device: torch.device, dtype: torch.dtype, n: int, repeats: int = 5) -> list[float]:
    """Throughput of an n x n x n matmul on random data."""
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    for _ in range(2):
        a @ b
    _sync(device)

    def once() -> float:
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            a @ b
            seconds = time.perf_counter() - t0
        return 2 * n ** 3 / seconds / 1e12

    return _best_of(once, repeats)


def median(xs: list[float]) -> float:
    return spread(xs).median
