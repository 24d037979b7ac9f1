"""`python -m lab residue` (lab/commands/residue.py): a profiler session's effect on this process's eager step,
measured by the sentinel's paired rounds before and after it; its refusals."""

from __future__ import annotations

import json

import pytest
import torch

from cli_helpers import one_line_error
from lab.__main__ import main
from lab.experiments import sentinel
from lab.measure import profiler_guard


def test_bad_arguments_are_refused_in_one_line(capsys) -> None:
    assert "--pairs 1" in one_line_error(capsys, "residue", "--profile", "smoke", "--pairs", "1")
    assert "--sessions 0" in one_line_error(capsys, "residue", "--profile", "smoke", "--sessions", "0")
    assert "unknown profile 'nope'" in one_line_error(capsys, "residue", "--profile", "nope")
    assert "--session cuda: the profile smoke runs on the CPU" in one_line_error(capsys, "residue", "--profile",
                                                                                  "smoke", "--session", "cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal of a CUDA profile on a host without CUDA")
def test_a_cuda_profile_without_cuda_is_refused(capsys) -> None:
    assert "no CUDA device visible" in one_line_error(capsys, "residue", "--profile", "gpu")


@pytest.mark.slow
@pytest.mark.parametrize("session, profiled", [("cpu", 2), ("none", 0)])
def test_the_paired_rounds_before_and_after_give_the_change_and_its_verdict(capsys, monkeypatch, session,
                                                                            profiled) -> None:
    """On the smoke profile (a warm-up of a fraction of a second for the test): the figures at both ends with
    intervals, the change and the fresh processes' own, the verdict; the sessions ran in this process (none for the
    control), and the libraries' lines are counted, not printed."""
    kwargs = sentinel.child_kwargs
    monkeypatch.setattr(sentinel, "child_kwargs", lambda ctx: kwargs(ctx) | {"min_s": 0.2, "budget_s": 10.0,
                                                                             "max_rounds": 6})
    before = len(profiler_guard.GUARD.sessions)
    capsys.readouterr()
    rc = main(["residue", "--profile", "smoke", "--session", session, "--sessions", "2", "--pairs", "4",
               "--pair-steps", "4", "--json"])
    said = capsys.readouterr()
    assert rc == 0, said.err
    out = json.loads(said.out)
    assert len(profiler_guard.GUARD.sessions) - before == profiled
    assert [s.cuda for s in profiler_guard.GUARD.sessions[before:]] == [False] * profiled
    assert (out["session"], out["pairs"], out["device"]) == (session, 4, "cpu") and out["step_ms"] > 0
    for fig in (out["in_run_over_fresh"]["start"], out["in_run_over_fresh"]["end"], out["in_run_change"],
                out["fresh_change"]):
        assert fig["value"] > 0 and fig["low"] <= fig["value"] <= fig["high"], out
    start, end = out["in_run_over_fresh"]["start"]["value"], out["in_run_over_fresh"]["end"]["value"]
    assert out["in_run_change"]["value"] == pytest.approx(end / start, rel=2e-3, abs=1e-4)  # stored to 4 decimals
    change = out["in_run_change"]
    if abs(change["value"] - 1) < 0.049 or change["low"] < 0.999 < 1.001 < change["high"]:  # (clear of rounding)
        assert out["clean"] is True
    elif abs(change["value"] - 1) > 0.051 and (change["low"] > 1.001 or change["high"] < 0.999):
        assert out["clean"] is False
    assert "over the run: at the start the run's process was" in out["detail"]  # the sentinel_end verdict's detail
    assert all(log["count"] >= 1 for log in out["library_logs"])
    assert "USDT" not in said.err  # kineto's lines (where this build writes them) stay off the console


def test_a_fresh_process_that_fails_is_one_line_and_exit_1(capsys, monkeypatch) -> None:
    """No figure without both ends: the failed child's check detail, one line, no traceback."""
    def failed(ctx, when, cpu=None):
        ctx.check(f"the sentinel child measured the step ({when})", False, detail="exit 137 (killed)", fatal=True)

    monkeypatch.setattr(sentinel, "measure_paired", failed)
    capsys.readouterr()
    assert main(["residue", "--profile", "smoke", "--session", "none"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.splitlines()[-1] == "python -m lab residue: the fresh processes did not measure the step: exit 137 (killed)"
    assert "Traceback" not in err
