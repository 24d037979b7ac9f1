"""lab/experiments/graph_break_repair.py: the RMS repair equals the original on the validation inputs."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest
import torch

from lab.experiments import graph_break_repair


@pytest.mark.parametrize("label,h,above", graph_break_repair.validation_inputs(2, 16, torch.device("cpu")))
def test_rms_repair_equal_on_validation_inputs(label, h, above) -> None:
    state = torch.full_like(h, 0.25)
    with redirect_stdout(io.StringIO()):
        ref = graph_break_repair.step_with_breaks(h, state)
    got = graph_break_repair.step_repaired(h, state)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)
    if label == "above":
        assert got[1][0, 0].item() == pytest.approx(0.325) and got[1][0, 1].item() == pytest.approx(0.225)
    if label == "zero":
        assert torch.isfinite(got[0]).all() and torch.allclose(got[1], torch.full_like(h, 0.225))
