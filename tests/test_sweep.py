"""lab/experiments/common/sweep.py: the shapes, random weights and the budget's counts and seconds."""

from __future__ import annotations

import math
import time

import pytest
import torch

from lab.step import decode
from lab.contract.profiles import SHAPES
from lab.experiments.common.sweep import Budget, parameters, random_weights


def test_shapes_and_random_weights() -> None:
    assert 123e6 < parameters(SHAPES["gpt2-124M"]) < 126e6
    assert 1.50e9 < parameters(SHAPES["gpt2-1.5B"]) < 1.60e9
    spec = SHAPES["tiny-4L"]
    w32 = random_weights(spec, "cpu", "float32")
    again = random_weights(spec, "cpu", "float32")
    w16 = random_weights(spec, "cpu", "bfloat16")
    assert w32.n_layer == 4 and w32.layers[0].attn_w.shape == (3 * 96, 96) and w32.layers[0].fc2_w.shape == (96, 384)
    assert torch.equal(w32.wte, again.wte) and w16.dtype == torch.bfloat16
    assert torch.equal(w16.layers[1].fc_w, w32.layers[1].fc_w.to(torch.bfloat16))  # the same numbers, rounded
    resid = w32.layers[0].proj_w.std().item() / w32.layers[0].attn_w.std().item()
    assert resid == pytest.approx(1 / math.sqrt(2 * 4), rel=0.15)  # GPT-2's scaled residual projections
    tokens = decode.generate_fixed(w32, torch.tensor([[1, 2, 3]]), 12)
    assert len(set(tokens[0].tolist())) > 3  # the init makes greedy decoding vary


def test_budget_counts_and_seconds() -> None:
    b = Budget(compiles=1)
    assert b.why_not() is None
    b.spend()
    assert "max_compiles" in b.why_not()
    late = Budget(seconds=10.0, start=time.perf_counter() - 11)
    assert "budget_s" in late.why_not() and Budget().why_not() is None
