"""lab/step/ceilings.py: the launch, bandwidth and compute bounds, measured with the clock they are given."""

from __future__ import annotations

import pytest
import torch

from lab.measure.timing import HostClock
from lab.step import ceilings
from lab.step.ceilings import attended_slots, step_bytes


def _fake_clock(*ticks: float) -> HostClock:
    it = iter(ticks)
    return HostClock(now=lambda: next(it))


def test_ceilings_read_the_clock_they_are_given() -> None:
    """Each repeat is one call between two marks (after the untimed warm-up): the fake clock's ticks are
    1, 2 and 4 ms apart, so the samples follow from the arithmetic alone."""
    cpu = torch.device("cpu")
    assert ceilings.launch_us_eager(cpu, ops=100, repeats=3, clock=_fake_clock(0.0, 0.001, 0.003, 0.007)) \
        == pytest.approx([10.0, 20.0, 40.0])  # us per op: ms * 1000 / ops
    nbytes = 4 << 20
    gbps = ceilings.copy_bandwidth_gbps(cpu, nbytes, repeats=2, clock=_fake_clock(0.0, 0.001, 0.003))
    assert gbps == pytest.approx([2 * nbytes / 1e-3 / 1e9, 2 * nbytes / 2e-3 / 1e9])
    tf = ceilings.matmul_tflops(cpu, torch.float32, 64, repeats=1, clock=_fake_clock(0.0, 0.5))
    assert tf == pytest.approx([2 * 64 ** 3 / 0.5 / 1e12])


def test_bound_arithmetic(tiny) -> None:
    _, w = tiny
    b = ceilings.bounds(kernels=200, per_kernel_us=1.0, nbytes=4_000_000_000, bandwidth_gbps=4000, flops=10**12,
                        peak_tflops=50)
    assert b.launch_ms == pytest.approx(0.2) and b.bandwidth_ms == pytest.approx(1.0)
    assert b.compute_ms == pytest.approx(20.0) and b.binding == "compute" and b.bound_ms == pytest.approx(20.0)
    E, L, V = w.n_embd, w.n_layer, w.wte.shape[0]
    assert ceilings.step_flops(w, 2, 64) == 2 * 2 * (L * 12 * E * E + V * E + L * 2 * 64 * E)
    cache = 2 * L * 3 * 64 * E * 4
    assert ceilings.step_bytes(w, 3, 64) - ceilings.step_bytes(w, 1, 64) == cache - 2 * L * 1 * 64 * E * 4 + 2 * E * 4
    with pytest.raises(ValueError):
        ceilings.bounds(1, 1.0, 1, 0.0, 1, 1.0)


def test_bytes_count_the_attended_cache_not_the_buffer(tiny) -> None:
    _, w = tiny
    assert attended_slots(16, 128) == 80.5  # positions 16..143 read 17..144 slots
    L, E = w.n_layer, w.n_embd
    assert step_bytes(w, 2, 10) - step_bytes(w, 2, 0) == 2 * L * 2 * 10 * E * 4
