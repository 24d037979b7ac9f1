"""lab/step/replay.py: replay validation rejects before it copies; a static graph replays like eager."""

from __future__ import annotations

import pytest
import torch

from lab.step.replay import check_like


def test_replay_validation_rejects_before_copy() -> None:
    static = [torch.zeros(1, 256)]
    check_like([torch.ones(1, 256)], static)
    for bad, what in ((torch.ones(2, 256), "shape"), (torch.ones(1, 256, dtype=torch.float16), "dtype")):
        with pytest.raises(ValueError, match=what):
            check_like([bad], static)
    with pytest.raises(ValueError, match="expected 1"):
        check_like([], static)
    meta = torch.ones(1, 256, device="meta")
    with pytest.raises(ValueError, match="device"):
        check_like([meta], static)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_static_graph_replays_like_eager() -> None:
    from lab.step.replay import StaticGraph

    model = torch.nn.Linear(256, 256).cuda().eval()
    x = torch.randn(1, 256, device="cuda")
    g = StaticGraph(model, (x,))
    y = torch.randn(1, 256, device="cuda")
    with torch.no_grad():
        torch.testing.assert_close(g(y), model(y))
    with pytest.raises(ValueError):
        g(y.cpu())
