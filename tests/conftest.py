"""Shared fixtures: the tiny model of the smoke profile, built once per session."""

from __future__ import annotations

import importlib
import os

import pytest
import torch

from lab.step import model as M
from lab.contract.profiles import TINY


@pytest.fixture(scope="session")
def tiny():
    """(transformers model, lab Weights) of the smoke profile's tiny GPT-2, on the CPU."""
    m = M.build_model(TINY, M.resolve_weights(TINY, "random"))
    return m, M.extract_weights(m)


@pytest.fixture(autouse=True)
def _no_label_between_tests():
    """`lab run --label` puts the label in its own process's environment (the manifest reads it there, and children
    inherit it); tests call the command in-process, so each test starts without one and leaves none behind."""
    from lab.run.manifest import LABEL_ENV

    before = os.environ.pop(LABEL_ENV, None)
    yield
    os.environ.pop(LABEL_ENV, None)
    if before is not None:
        os.environ[LABEL_ENV] = before


@pytest.fixture
def fake(monkeypatch):
    """fake(id, fn): replace an experiment's run() by a quick stand-in (its catalogue entry and options stay)."""

    def put(experiment_id: str, fn) -> None:
        monkeypatch.setattr(importlib.import_module(f"lab.experiments.{experiment_id}"), "run", fn)

    return put


# Every CUDA test has a time limit (pytest-timeout, on the H200 image; where it is not installed the marker is
# only declared): a test that stalls fails with its stack, and the rest of `pytest -m cuda` still runs. The
# longest CUDA test took about 100 s on an H200 (2026-12-01, 23 tests in 243 s).
CUDA_TIMEOUT_S = 240
# The whole experiments through the runner on CUDA (tests/e2e/test_gpu_*.py) took 4 min 46 s on an H200
# (2026-12-02: 8 tests in 286 s, after 76 s for the other 28): they run on request, so that `pytest -m cuda`
# stays within 5 minutes.
CUDA_E2E_ENV = "LAB_CUDA_E2E"
CUDA_E2E_REASON = (f"a whole experiment through the runner on CUDA (these 8 tests: about 5 minutes on an H200): "
                   f"{CUDA_E2E_ENV}=1 runs them; `nox -s gpu_lab` runs every experiment at full size")
try:
    import pytest_timeout  # noqa: F401
    HAVE_TIMEOUT = True
except ImportError:
    HAVE_TIMEOUT = False


def pytest_configure(config):
    if not HAVE_TIMEOUT:
        config.addinivalue_line("markers", "timeout(seconds): a test's time limit (pytest-timeout, where installed)")


def pytest_collection_modifyitems(config, items):
    """Skip the tests marked `cuda` without a CUDA device (only those: a test or parameter merely named
    after CUDA, like the cuda image's structure checks, runs everywhere); with one, give each a time limit."""
    if torch.cuda.is_available():
        e2e = os.environ.get(CUDA_E2E_ENV) == "1"
        for item in items:
            if item.get_closest_marker("cuda") is not None and item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(CUDA_TIMEOUT_S))
            if item.get_closest_marker("cuda_e2e") is not None and not e2e:
                item.add_marker(pytest.mark.skip(reason=CUDA_E2E_REASON))
        return
    skip = pytest.mark.skip(reason="no CUDA device")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)
