"""lab.measure.profiler_guard: a profiler session that leaves CUPTI attached refuses every later timing of the process,
and every experiment times before it profiles (the spy: strict mode counts every session as a residue)."""

from __future__ import annotations

import contextlib
import os

import pytest
import torch

from lab.contract import profiles
from lab.measure import profiler_guard as G
from lab.measure.stepprofile import count_kernels
from lab.measure.timing import HostClock, rotating_rounds, time_calls
from lab.run import runner


@pytest.fixture(autouse=True)
def clean_guard(monkeypatch):
    G.GUARD.reset()
    monkeypatch.delenv(G.TEARDOWN, raising=False)
    monkeypatch.delenv(G.STRICT_ENV, raising=False)
    yield
    G.GUARD.reset()


def _fake_profiler(monkeypatch, leaves: str | None):
    """torch.profiler.profile as a stand-in that sets TEARDOWN_CUPTI as torch's does when cudagraphs are on."""

    @contextlib.contextmanager
    def profile(activities=None, **_):
        if leaves is not None:
            os.environ[G.TEARDOWN] = leaves
        yield object()

    monkeypatch.setattr(torch.profiler, "profile", profile)


def test_a_cpu_profile_leaves_no_residue_and_timing_goes_on():
    count_kernels(lambda: torch.ones(4) + 1, torch.device("cpu"))
    assert G.GUARD.sessions and G.GUARD.residue is None
    assert len(time_calls(lambda: None, 3, HostClock())) == 3


def test_a_cuda_session_is_torn_down_by_default(monkeypatch):
    _fake_profiler(monkeypatch, leaves=None)  # torch leaves the variable as the lab set it
    with G.session("step", cuda=True):
        assert os.environ[G.TEARDOWN] == "1"
    assert G.GUARD.residue is None and G.GUARD.sessions[-1].torn_down
    time_calls(lambda: None, 2, HostClock())


def test_torch_turning_teardown_off_refuses_every_later_timing(monkeypatch):
    _fake_profiler(monkeypatch, leaves="0")
    with G.session("count_kernels eager", cuda=True):
        pass
    assert "torch's profiler" in G.GUARD.residue and "count_kernels eager" in G.GUARD.residue
    with pytest.raises(G.ProfilerResidue, match="refused: the profiler session 'count_kernels eager'"):
        time_calls(lambda: None, 2, HostClock())
    with pytest.raises(G.ProfilerResidue):
        rotating_rounds({"a": lambda: [1.0]}, 2)


def test_a_user_who_turned_teardown_off_is_named(monkeypatch):
    monkeypatch.setenv(G.TEARDOWN, "0")
    _fake_profiler(monkeypatch, leaves=None)
    with G.session("s", cuda=True):
        pass
    assert "set by the user" in G.GUARD.residue


def test_strict_mode_counts_every_session_within_one_experiment(monkeypatch):
    monkeypatch.setenv(G.STRICT_ENV, "1")
    count_kernels(lambda: torch.ones(2), torch.device("cpu"))
    with pytest.raises(G.ProfilerResidue):
        time_calls(lambda: None, 1, HostClock())
    G.experiment_started("next")  # strict: the next experiment's order is checked on its own
    time_calls(lambda: None, 1, HostClock())


def _profiles_then_times(ctx):
    count_kernels(lambda: torch.ones(2), ctx.device)
    time_calls(lambda: None, 2, ctx.clock)


def _times_then_profiles(ctx):
    time_calls(lambda: None, 2, ctx.clock)
    count_kernels(lambda: torch.ones(2), ctx.device)


def test_the_runner_records_a_refused_timing_as_a_failed_fatal_check(tmp_path, monkeypatch, fake):
    monkeypatch.setenv(G.STRICT_ENV, "1")
    fake("graph_breaks", _profiles_then_times)
    fake("recompiles", _times_then_profiles)
    res = runner.run(profiles.get("smoke"), tmp_path, only=["graph_breaks", "recompiles"])
    bad, good = res.record("graph_breaks"), res.record("recompiles")
    assert bad.status == "FAILED" and "ProfilerResidue" in bad.reason.message
    assert [c.name for c in bad.checks if not c.passed] == ["no timing after a profiler left its residue"]
    assert good.status == "OK"


@pytest.mark.slow
def test_every_experiment_of_the_smoke_profile_that_profiles_times_first(tmp_path, monkeypatch):
    """The spy: strict mode refuses any timing after a profile inside one experiment; every experiment that both
    times and profiles must come out without a refused timing."""
    monkeypatch.setenv(G.STRICT_ENV, "1")
    ids = ["ceilings", "launch_overhead", "fusion", "gemm_bound", "amdahl", "diagnose", "model_scaling"]
    res = runner.run(profiles.get("smoke"), tmp_path, only=ids)
    refused = {r.id: r.reason.message for r in res.experiments if r.status == "FAILED"
               and any(c.name == "no timing after a profiler left its residue" for c in r.checks)}
    assert not refused, refused
    assert len(G.GUARD.sessions) >= len(ids)  # they did profile: the test could have failed
    assert [r.id for r in res.experiments if r.status != "OK"] == [], [(r.id, r.reason) for r in res.experiments]


def test_rounds_of_methods_named_by_numbers_are_timed():
    """graph_buckets names its methods by batch size: the guard's label must not assume strings."""
    assert rotating_rounds({1: lambda: [1.0], 2: lambda: [2.0]}, 2) == {1: [[1.0], [1.0]], 2: [[2.0], [2.0]]}
