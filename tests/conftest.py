"""Shared fixtures: the tiny model of the smoke profile, built once per session."""

from __future__ import annotations

import importlib

import pytest
import torch

from lab.step import model as M
from lab.contract.profiles import TINY


@pytest.fixture(scope="session")
def tiny():
    """(transformers model, lab Weights) of the smoke profile's tiny GPT-2, on the CPU."""
    m = M.build_model(TINY, M.resolve_weights(TINY, "random"))
    return m, M.extract_weights(m)


@pytest.fixture
def fake(monkeypatch):
    """fake(id, fn): replace an experiment's run() by a quick stand-in (its catalogue entry and options stay)."""

    def put(experiment_id: str, fn) -> None:
        monkeypatch.setattr(importlib.import_module(f"lab.experiments.{experiment_id}"), "run", fn)

    return put


def pytest_collection_modifyitems(config, items):
    """Skip the tests marked `cuda` without a CUDA device (only those: a test or parameter merely named
    after CUDA, like the cuda image's structure checks, runs everywhere)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)
