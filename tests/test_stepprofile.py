"""lab/measure/stepprofile.py: a step's GPU busy time is the union of its kernels' intervals."""

from __future__ import annotations

import pytest
import torch

from lab.step import methods as stepmethods
from lab.contract.names import Method
from lab.measure.stepprofile import busy_us, count_kernels, sequence

from step_helpers import seeded_prompt


def test_gpu_busy_time_is_the_union_of_kernel_intervals() -> None:
    assert busy_us([]) == 0.0
    assert busy_us([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (5.5, 5.7)]) == 4.0  # overlap counted once
    assert busy_us([(4.0, 5.0), (0.0, 1.0)]) == 2.0  # any order


def test_the_sequence_is_every_kernel_in_start_order() -> None:
    """What lab.step.fused.breakdown matches to the step's launches: start order, overlapping kernels included."""
    named = [("b", 5.0, 2.0), ("a", 1.0, 3.5), ("a", 1.0, 1.25), ("c", 2.0, 9.0)]
    assert sequence(named) == [("a", 3.5), ("a", 1.25), ("c", 9.0), ("b", 2.0)]  # ties keep their event order


@pytest.mark.cuda
def test_gpu_busy_time_of_a_step_on_cuda(tiny) -> None:
    """On the device: busy time is the union of the step's kernels, within their summed time and their span."""
    from lab.step.model import extract_weights

    w = extract_weights(tiny[0], device="cuda")
    for name in (Method.EAGER, Method.GRAPH):
        m = stepmethods.build(name, w, seeded_prompt().cuda(), 40)
        m.start()
        k = count_kernels(m.call, torch.device("cuda"))
        assert k["kernels"] > 10 and 0 < k["busy_us"] <= k["span_us"] + 1e-3, (name, k)
        assert k["busy_us"] <= k["device_us"] + 1e-3, (name, k)
