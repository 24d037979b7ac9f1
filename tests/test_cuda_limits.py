"""The suite's own rule for CUDA tests (tests/conftest.py): skipped with a reason without a device, and with one,
each has a time limit, so a stalled test fails with its stack and `pytest -m cuda` still finishes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import conftest


class _Item:
    def __init__(self, *marks: pytest.MarkDecorator) -> None:
        self.marks = [m.mark for m in marks]

    def get_closest_marker(self, name: str):
        return next((m for m in reversed(self.marks) if m.name == name), None)

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.marks.append(marker.mark)


def test_with_a_device_every_cuda_test_gets_a_time_limit_and_keeps_its_own(monkeypatch) -> None:
    monkeypatch.setattr(conftest.torch.cuda, "is_available", lambda: True)
    plain, own, cpu = _Item(pytest.mark.cuda), _Item(pytest.mark.cuda, pytest.mark.timeout(600)), _Item()
    conftest.pytest_collection_modifyitems(SimpleNamespace(), [plain, own, cpu])
    assert plain.get_closest_marker("timeout").args == (conftest.CUDA_TIMEOUT_S,)
    assert own.get_closest_marker("timeout").args == (600,)
    assert cpu.get_closest_marker("timeout") is None and cpu.get_closest_marker("skip") is None


def test_without_a_device_cuda_tests_are_skipped_with_the_reason(monkeypatch) -> None:
    monkeypatch.setattr(conftest.torch.cuda, "is_available", lambda: False)
    item, cpu = _Item(pytest.mark.cuda), _Item()
    conftest.pytest_collection_modifyitems(SimpleNamespace(), [item, cpu])
    assert item.get_closest_marker("skip").kwargs["reason"] == "no CUDA device"
    assert cpu.get_closest_marker("skip") is None


def test_with_a_device_the_whole_experiment_tests_run_on_request(monkeypatch) -> None:
    monkeypatch.setattr(conftest.torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv(conftest.CUDA_E2E_ENV, raising=False)
    e2e, unit = _Item(pytest.mark.cuda, pytest.mark.cuda_e2e), _Item(pytest.mark.cuda)
    conftest.pytest_collection_modifyitems(SimpleNamespace(), [e2e, unit])
    assert e2e.get_closest_marker("skip").kwargs["reason"] == conftest.CUDA_E2E_REASON
    assert unit.get_closest_marker("skip") is None
    monkeypatch.setenv(conftest.CUDA_E2E_ENV, "1")
    asked = _Item(pytest.mark.cuda, pytest.mark.cuda_e2e)
    conftest.pytest_collection_modifyitems(SimpleNamespace(), [asked])
    assert asked.get_closest_marker("skip") is None and asked.get_closest_marker("timeout") is not None
