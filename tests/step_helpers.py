"""Shared pieces of the step tests: a seeded prompt, and decode steps that break a graph or feed themselves wrongly."""

from __future__ import annotations

import torch

from lab.step import decode


def seeded_prompt(batch: int = 2, length: int = 8) -> torch.Tensor:
    """A seeded (batch, length) prompt of token ids below 512."""
    return torch.randint(0, 512, (batch, length), generator=torch.Generator().manual_seed(0))


def breaking_step(state: decode.DecodeState, w) -> torch.Tensor:
    """The decode step with a deliberate graph break after it."""
    logits = decode.decode_step(state, w)
    torch._dynamo.graph_break()
    return logits


def bad_feedback_step(state: decode.DecodeState, w) -> torch.Tensor:
    """The eager step, but it feeds itself a wrong token: free-running it diverges at once."""
    logits = decode.decode_step(state, w)
    state.tok.copy_((state.tok + 1) % logits.shape[-1])
    return logits
