"""lab.step.model.build_model generates random weights on the run's device (a GPU host's CPU took 12.4 s for GPT-2
124M, its GPU 0.04 s), the same values in every process of a run, and says so in the provenance."""

from __future__ import annotations

from typing import Any

import torch
import transformers

from lab.contract.profiles import TINY
from lab.step.model import build_model, extract_weights, resolve_weights


def test_random_weights_are_generated_on_the_runs_device(monkeypatch) -> None:
    seen: list[torch.device] = []
    cls = transformers.GPT2LMHeadModel
    real = cls.__init__

    def recording(self: Any, config: Any, *args: Any, **kwargs: Any) -> None:
        seen.append(torch.get_default_device())
        real(self, config, *args, **kwargs)

    monkeypatch.setattr(cls, "__init__", recording)
    model = build_model(TINY, resolve_weights(TINY, "random"), device="meta")
    assert seen == [torch.device("meta")] and next(model.parameters()).device.type == "meta"


def test_two_builds_with_the_seed_hold_the_same_values_and_the_provenance_names_the_generator() -> None:
    provenance = resolve_weights(TINY, "random")
    a, b = (extract_weights(build_model(TINY, provenance, device="cpu")) for _ in range(2))
    assert all(torch.equal(x, y) for x, y in zip(a.tensors(), b.tensors()))
    assert "run's device" in provenance["generator"] and provenance["seed"] == TINY.seed
