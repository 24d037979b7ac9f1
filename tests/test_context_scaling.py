"""lab/experiments/context_scaling.py: the crossover rule, on fed numbers."""

from __future__ import annotations

import pytest
import torch

from lab.experiments import context_scaling as cs
from lab.contract.profiles import SHAPES
from lab.experiments.common.sweep import random_weights


def test_context_crossover_rule() -> None:
    at, how = cs.crossover([256, 512, 1024], [0.5, 0.8, 1.6])
    assert how == "crosses" and at == pytest.approx(2 ** 9.25)
    assert cs.crossover([256, 512], [0.3, 0.6]) == (None, "always")
    assert cs.crossover([256, 512], [1.2, 0.6]) == (None, "never")
    assert "about 609 slots" in cs.phrase(16, "graph", at, how, [256, 512, 1024], [0.5, 0.8, 1.6])
    assert "every length up to 512" in cs.phrase(1, "graph", None, "always", [256, 512], [0.3, 0.6])
    w = random_weights(SHAPES["tiny-2L"], "cpu", "float32")
    longer = cs.extend_positions(w, 200)
    assert longer.wpe.shape == (200, 64) and torch.equal(longer.wpe[:128], w.wpe) and cs.extend_positions(w, 64) is w
