"""The fixed-shape step against transformers' greedy generate; garbage slots; batch independence; split step."""

from __future__ import annotations

import torch

from lab.step import decode


def _prompts(batch: int, seed: int, vocab: int = 512, length: int = 8) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_fixed_and_growing_equal_reference_with_varied_tokens(tiny) -> None:
    model, w = tiny
    for p in (_prompts(1, 0), _prompts(4, 1)):
        ref = decode.generate_reference(model, p, 24)
        assert min(len(set(r.tolist())) for r in ref) >= 8, "equality on repeated tokens proves nothing"
        assert torch.equal(decode.generate_fixed(w, p, 24), ref)
        assert torch.equal(decode.generate_growing(w, p, 24), ref)


def test_a_broken_step_is_caught(tiny) -> None:
    """The equality test must fail when the step reads an unreached slot (mask removed)."""
    model, w = tiny
    p = _prompts(2, 3)
    ref = decode.generate_reference(model, p, 16)
    state = decode.new_state(w, 2, 40)
    g = torch.Generator().manual_seed(0)
    for c in state.caches:
        c.normal_(generator=g).mul_(100)
    decode.prefill(state, w, p)
    original = decode._attend
    try:
        decode._attend = lambda q, k, v, masked: original(q, k, v, None)  # reads every slot
        for _ in range(15):
            decode.decode_step(state, w)
    finally:
        decode._attend = original
    assert not torch.equal(state.out[:, 8:24], ref)


def test_garbage_in_unreached_slots_changes_nothing(tiny) -> None:
    _, w = tiny
    p = _prompts(3, 4)
    clean = decode.generate_fixed(w, p, 20, max_len=48)
    state = decode.new_state(w, 3, 48)
    g = torch.Generator().manual_seed(1)
    for c in state.caches:
        c.normal_(generator=g).mul_(1e4)
    decode.prefill(state, w, p)
    for _ in range(19):
        decode.decode_step(state, w)
    assert torch.equal(state.out[:, 8:28], clean)


def test_batch_independence(tiny) -> None:
    _, w = tiny
    p = _prompts(3, 5)
    together = decode.generate_fixed(w, p, 16)
    alone = torch.cat([decode.generate_fixed(w, p[i:i + 1], 16) for i in range(3)])
    assert torch.equal(together, alone)


def test_step_keeps_position_and_tokens_on_device(tiny) -> None:
    _, w = tiny
    state = decode.new_state(w, 2, 32)
    decode.prefill(state, w, _prompts(2, 6))
    assert int(state.pos) == 8 and torch.equal(state.tok[:, 0], state.out[:, 8])
    decode.decode_step(state, w)
    assert int(state.pos) == 9 and torch.equal(state.tok[:, 0], state.out[:, 9])


def test_split_step_equals_indexed_step(tiny) -> None:
    _, w = tiny
    p = _prompts(2, 7)
    a, b = decode.new_state(w, 2, 40), decode.new_state(w, 2, 40)
    decode.prefill(a, w, p)
    decode.prefill(b, w, p)
    for _ in range(15):
        la = decode.decode_step(a, w)
        lb = decode.decode_step_split(b, w)
        assert (la - lb).abs().max().item() < 1e-5
    assert torch.equal(a.out, b.out) and all(torch.equal(x, y) for x, y in zip(a.caches, b.caches))


def test_snapshot_restore_in_place(tiny) -> None:
    _, w = tiny
    state = decode.new_state(w, 1, 24)
    decode.prefill(state, w, _prompts(1, 8))
    ptrs = {k: t.data_ptr() for k, t in state.buffers().items()}
    saved = state.snapshot()
    for _ in range(3):
        decode.decode_step(state, w)
    state.restore(saved)
    assert all(torch.equal(t, saved[k]) for k, t in state.buffers().items())
    assert {k: t.data_ptr() for k, t in state.buffers().items()} == ptrs


def test_prompts_are_validated() -> None:
    import pytest

    with pytest.raises(ValueError, match="equal lengths"):
        decode.check_prompts([[1, 2], [3]], 512)
    with pytest.raises(ValueError, match="out of range"):
        decode.check_prompts([[1, 9999]], 512)
