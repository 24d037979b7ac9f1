"""lab/step/graphs.py: a graphed step refuses CPU state; on CUDA it restores the state and replays eager's tokens."""

from __future__ import annotations

import pytest
import torch

from lab.step import decode
from lab.step.graphs import CacheFullError, GraphedStep


def test_graphed_step_refuses_cpu_state(tiny) -> None:
    _, w = tiny
    with pytest.raises(ValueError, match="CUDA"):
        GraphedStep(decode.decode_step, decode.new_state(w, 1, 16), w)


@pytest.mark.cuda
def test_graphed_step_restores_state_and_replays_eager_tokens(tiny) -> None:
    model, _ = tiny
    from lab.step.model import extract_weights

    w = extract_weights(model, device="cuda")
    prompt = torch.randint(0, 512, (2, 8), generator=torch.Generator().manual_seed(0)).cuda()
    state = decode.new_state(w, 2, 32)
    decode.prefill(state, w, prompt)
    before = state.snapshot()
    g = GraphedStep(decode.decode_step, state, w)
    assert all(torch.equal(t, before[k]) for k, t in state.buffers().items())
    for _ in range(10):
        g.replay()
    ref = decode.generate_fixed(w, prompt, 11, max_len=32)
    assert torch.equal(state.out[:, 8:19].cpu(), ref)
    for _ in range(32):
        try:
            g.replay()
        except CacheFullError:
            break
    else:
        pytest.fail("the host guard never fired")
    assert g.position == 31  # the step at 31 would write output slot 32 of a 32-slot cache
