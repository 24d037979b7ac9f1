"""lab/experiments/fusion.py: the fusion arithmetic."""

from __future__ import annotations

import torch

from lab.experiments import fusion


def test_fusion_arithmetic() -> None:
    assert fusion.bytes_moved(3, 100, fused=False) == 600 and fusion.bytes_moved(3, 100, fused=True) == 200
    x = torch.rand(10)
    y = fusion.make_chain(4)(x)
    torch.testing.assert_close(y, ((x * 1.0001 + 0.001) * 0.9999) - 0.0005)
