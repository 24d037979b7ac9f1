"""One capture helper: nothing else in lab/ captures a CUDA graph, and what it returns (on CUDA)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from lab.step.capture import capture

LAB = Path(__file__).resolve().parents[1] / "lab"
# Files allowed to call torch.cuda.graph / make a CUDAGraph themselves: the helper only. A hazard
# demonstration that needs a raw capture would be listed here with the reason.
ALLOWED = {"capture.py"}


def test_only_the_capture_helper_captures() -> None:
    raw = re.compile(r"torch\.cuda\.graph\(|CUDAGraph\(|capture_begin\(")
    offenders = [f"{p.relative_to(LAB)}:{i}" for p in sorted(LAB.rglob("*.py")) if p.name not in ALLOWED
                 for i, line in enumerate(p.read_text().splitlines(), 1) if raw.search(line)]
    assert offenders == [], f"capture through lab.step.capture.capture instead: {offenders}"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a host without CUDA")
def test_capture_refuses_without_cuda() -> None:
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        capture(lambda: None)


@pytest.mark.cuda
def test_capture_warms_up_on_a_side_stream_records_and_replays() -> None:
    x = torch.zeros(4, device="cuda")
    calls: list[int] = []

    def step() -> torch.Tensor:
        calls.append(1)  # host code runs at warm-up and at capture, never at replay
        x.add_(1.0)
        return x * 2

    c = capture(step, warmup=2)
    assert len(calls) == 3 and torch.equal(x.cpu(), torch.full((4,), 2.0))  # the capture did not execute
    assert c.warmup_s > 0 and c.capture_s > 0 and c.setup_s == c.warmup_s + c.capture_s
    assert isinstance(c.pool_bytes, int)  # may be negative: torch.cuda.graph empties the cache first
    out = c.replay()
    torch.cuda.synchronize()
    assert out is c.output and len(calls) == 3
    assert torch.equal(x.cpu(), torch.full((4,), 3.0)) and torch.equal(out.cpu(), torch.full((4,), 6.0))
    pool = c.graph.pool()
    shared = capture(lambda: x * 3, warmup=1, pool=pool, capture_error_mode="thread_local")
    shared.replay()
    torch.cuda.synchronize()
    assert torch.equal(shared.output.cpu(), torch.full((4,), 9.0))


@pytest.mark.cuda
def test_static_graph_and_ceilings_use_the_helper() -> None:
    from lab.step import ceilings
    from lab.step.replay import StaticGraph

    lin = torch.nn.Linear(8, 8).cuda()
    g = StaticGraph(lin, (torch.randn(2, 8, device="cuda"),), warmup=2)
    x = torch.randn(2, 8, device="cuda")
    with torch.no_grad():
        assert torch.allclose(g(x), lin(x), rtol=1e-5, atol=1e-6)
    assert g.setup_s > 0
    us = ceilings.launch_us_graph_node(torch.device("cuda"), ops=200, repeats=3)
    assert len(us) == 3 and all(0 < u < 100 for u in us)
    eager = ceilings.launch_us_eager(torch.device("cuda"), ops=200, repeats=3)
    assert len(eager) == 3 and all(u > 0 for u in eager)
