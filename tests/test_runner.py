"""lab/run/runner.py: statuses, reasons, atomic partial results, a failure or an interrupt never loses the run."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

from lab.contract import catalogue, metrics, profiles
from lab.contract import metrics as M
from lab.run import runner
from lab.contract.results import load

from cli_helpers import cli, one_compile, one_graph

SWEEPS = ("peer_generate", "model_scaling", "context_scaling", "graph_buckets", "data_dependent_branch")

SMOKE = profiles.get("smoke")
THREE = ["graph_breaks", "recompiles", "decode_recompiles"]


def test_gpu_profile_without_cuda_is_not_run_no_cuda(tmp_path: Path) -> None:
    """Every experiment of the gpu profile is NOT_RUN: no_cuda on a host without CUDA (host-only ones run)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    res = runner.run(profiles.get("gpu"), tmp_path)
    core = catalogue.resolve(None, sweeps=False)  # the sweeps have a profile of their own (gpu-sweep), fused_anatomy
    assert core == [s for s in catalogue.CATALOGUE if not s.sweep and not s.by_name]  # runs by name only
    assert [r.id for r in res.experiments] == [s.id for s in core]
    for spec, rec in zip(core, res.experiments):
        if "host" in spec.needs:
            assert rec.status == "OK", rec
        else:
            assert rec.status == "NOT_RUN" and rec.reason.code == "no_cuda", rec
            assert "NVIDIA" in rec.reason.message
    assert load(tmp_path).run.state == "complete"


def test_failures_are_recorded_and_the_run_goes_on(tmp_path: Path, monkeypatch) -> None:
    import lab.experiments.recompiles as rec

    def boom(ctx):
        ctx.metric(metrics.COMPILES, 1)
        raise RuntimeError("synthetic failure")

    monkeypatch.setattr(rec, "run", boom)
    res = runner.run(profiles.get("smoke"), tmp_path, only=["recompiles", "toolchain"])
    r = res.record("recompiles")
    assert r.status == "FAILED" and r.reason.code == "exception" and "synthetic failure" in r.reason.message
    assert "RuntimeError" in r.error["traceback"]
    assert res.record("toolchain").status == "OK"


def test_failed_fatal_check_fails_the_record(tmp_path: Path, monkeypatch) -> None:
    import lab.experiments.recompiles as rec

    monkeypatch.setattr(rec, "run", lambda ctx: ctx.check("tokens equal", False, detail="diverged at 3"))
    res = runner.run(profiles.get("smoke"), tmp_path, only=["recompiles"])
    assert res.record("recompiles").status == "FAILED"
    assert res.record("recompiles").reason.code == "check_failed"


def test_interrupted_run_keeps_what_it_measured(tmp_path: Path, monkeypatch) -> None:
    import lab.experiments.recompiles as rec

    def interrupt(ctx):
        raise KeyboardInterrupt

    monkeypatch.setattr(rec, "run", interrupt)
    with pytest.raises(KeyboardInterrupt):
        runner.run(profiles.get("smoke"), tmp_path, only=["toolchain", "recompiles"])
    saved = load(tmp_path)
    assert saved.run.state == "interrupted"
    assert [(r.id, r.status) for r in saved.experiments] == [("toolchain", "OK"), ("recompiles", "NOT_RUN")]
    assert saved.record("recompiles").reason.code == "interrupted"


def test_an_experiment_without_code_is_not_run_not_implemented_and_has_no_options() -> None:
    """lab.run loads an experiment's code by the catalogue's module path; the catalogue imports none."""
    import dataclasses
    from types import SimpleNamespace

    from lab.contract.options import NoOptions
    from lab.contract.reasons import Code
    from lab.run.context import experiment_module, options_class

    spec = dataclasses.replace(catalogue.BY_ID["toolchain"], id="not_written_yet", needs=())
    assert spec.module == "lab.experiments.not_written_yet" and experiment_module(spec) is None
    assert options_class(spec) is NoOptions and experiment_module(catalogue.BY_ID["toolchain"]).run
    rec = runner.run_experiment(spec, SMOKE, None, SimpleNamespace(experiments=[]), None)
    assert rec.status == "NOT_RUN" and rec.reason.code == Code.NOT_IMPLEMENTED, rec.reason


def test_missing_prerequisite_uses_toolchain_reason(tmp_path: Path) -> None:
    spec = catalogue.ExperimentSpec("graph_breaks", "t", "000", ("triton",))
    tc = runner.probe()
    tc.triton.importable, tc.triton.why_not = False, "ModuleNotFoundError: No module named 'triton'"
    reason = runner.prerequisite_reason(spec, profiles.get("smoke"), tc)
    assert reason.code == "no_triton" and "install" in reason.message


THREE = ["graph_breaks", "recompiles", "decode_recompiles"]


def test_sys_exit_inside_an_experiment_is_failed_and_the_run_goes_on(tmp_path: Path, fake) -> None:
    """Problem 5: an experiment calling sys.exit ended the whole run, later experiments lost, state 'running'."""

    def exits(ctx) -> None:
        ctx.metric(M.COMPILES, 2)
        sys.exit(3)

    fake("graph_breaks", one_graph)
    fake("recompiles", exits)
    fake("decode_recompiles", one_compile)
    res = runner.run(SMOKE, tmp_path, only=THREE)
    assert [r.status for r in res.experiments] == ["OK", "FAILED", "OK"]
    failed = res.record("recompiles")
    assert failed.reason.code == "exception" and "SystemExit" in failed.reason.message and "3" in failed.reason.message
    assert failed.metric("compiles").value == 2  # what it measured before is kept
    assert load(tmp_path).run.state == "complete"


def test_an_unrecordable_value_is_failed_naming_the_metric_and_numpy_scalars_are_numbers(tmp_path: Path,
                                                                                       fake) -> None:
    import numpy as np
    import torch

    def tensor_metric(ctx) -> None:
        ctx.metric(M.GRAPHS, 1)
        ctx.metric(M.GRAPH_BREAKS, torch.tensor(2))

    def numpy_values(ctx) -> None:
        ctx.metric(M.COMPILES, np.int64(3), batch=np.int64(2))
        ctx.note("scalars", {"ratio": np.float32(0.5), "ok": np.bool_(True), "n": [np.int64(1), 2]})

    def set_note(ctx) -> None:
        ctx.metric(M.COMPILES, 1)
        ctx.note("seen", {1, 2})
        ctx.metric(M.COMPILES, 2)  # never reached: the note failed the experiment where it was recorded

    fake("graph_breaks", tensor_metric)
    fake("recompiles", numpy_values)
    fake("decode_recompiles", set_note)
    res = runner.run(SMOKE, tmp_path, only=THREE)
    saved = load(tmp_path)
    gb, rc, dr = (saved.record(i) for i in THREE)
    assert gb.status == "FAILED" and "'graph_breaks'" in gb.reason.message and "Tensor" in gb.reason.message
    assert [m.name for m in gb.metrics] == ["graphs"]
    assert rc.status == "OK" and rc.metric("compiles").value == 3 and rc.metric("compiles").params == {"batch": 2}
    assert rc.notes["scalars"] == {"ratio": 0.5, "ok": True, "n": [1, 2]}
    assert type(res.record("recompiles").metric("compiles").value) is int
    assert dr.status == "FAILED" and "note 'seen'" in dr.reason.message and "set" in dr.reason.message
    assert [m.value for m in dr.metrics] == [1] and "set_note" in dr.error["traceback"]
    assert saved.run.state == "complete"


def test_an_interrupted_run_records_every_experiment_it_was_asked_for(tmp_path: Path, fake) -> None:
    """Problem 6: an interrupted run recorded nothing for the experiments it never reached."""

    def interrupted(ctx) -> None:
        ctx.metric(M.COMPILES, 5)
        raise KeyboardInterrupt

    fake("graph_breaks", one_graph)
    fake("recompiles", interrupted)
    fake("decode_recompiles", one_compile)
    with pytest.raises(KeyboardInterrupt):
        runner.run(SMOKE, tmp_path, only=THREE)
    saved = load(tmp_path)
    assert saved.run.state == "interrupted" and saved.run.finished_at
    assert [(r.id, r.status) for r in saved.experiments] == [
        ("graph_breaks", "OK"), ("recompiles", "NOT_RUN"), ("decode_recompiles", "NOT_RUN")]
    during, before = saved.record("recompiles"), saved.record("decode_recompiles")
    assert during.reason.code == before.reason.code == "interrupted"
    assert "during this experiment" in during.reason.message and during.metric("compiles").value == 5
    assert "before this experiment started" in before.reason.message and "--resume" in before.reason.message


def test_sigterm_is_recorded_like_ctrl_c(tmp_path: Path, capsys, fake) -> None:
    def terminated(ctx) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # the handler raises before this ends

    fake("graph_breaks", terminated)
    fake("recompiles", one_compile)
    rc, err = cli(capsys, "run", "--profile", "smoke", "--only", "graph_breaks,recompiles", "--out", str(tmp_path))
    assert rc == 128 + signal.SIGTERM and "stopped by SIGTERM" in err and "Traceback" not in err
    saved = load(tmp_path)
    assert saved.run.state == "interrupted"
    assert [(r.status, r.reason.code) for r in saved.experiments] == [("NOT_RUN", "interrupted")] * 2
    assert "SIGTERM" in saved.record("graph_breaks").reason.message
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # put back


def test_an_error_of_the_runner_itself_still_leaves_a_record_for_every_experiment(tmp_path: Path, capsys, fake,
                                                                                   monkeypatch) -> None:
    fake("graph_breaks", one_graph)
    fake("recompiles", one_compile)

    def broken(record) -> None:
        raise RuntimeError("a bug in the runner's printing")

    monkeypatch.setattr(runner.out, "experiment_finished", broken)
    rc, err = cli(capsys, "run", "--profile", "smoke", "--only", "graph_breaks,recompiles", "--out", str(tmp_path))
    assert rc == 1 and "Traceback" in err and "bug in the lab" in err and "README.md" in err
    saved = load(tmp_path)
    assert saved.run.state == "interrupted"
    assert [r.status for r in saved.experiments] == ["OK", "NOT_RUN"]
    assert "RuntimeError" in saved.record("recompiles").reason.message


def test_gpu_sweep_without_cuda_is_not_run_no_cuda(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    res = runner.run(profiles.get("gpu-sweep"), tmp_path)
    assert [(r.id, r.status, r.reason.code) for r in res.experiments] == [(i, "NOT_RUN", "no_cuda") for i in ("sentinel", *SWEEPS, "sentinel_end")]


# ---------------------------------------------------------------------------- a run in chunks (--stop-after)

class FakeClock:
    """lab.run.budget's clock, moved only by the fake experiments (the setup of a start takes no time on it)."""

    def __init__(self) -> None:
        self.t = 5000.0

    def __call__(self) -> float:
        return self.t

    def takes(self, seconds: float):
        """An experiment that takes `seconds` on this clock and records what its catalogue entry declares."""

        def run(ctx) -> None:
            self.t += seconds
            (one_graph if ctx.spec.id == "graph_breaks" else one_compile)(ctx)
        return run


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    from lab.run import budget

    fake_clock = FakeClock()
    monkeypatch.setattr(budget, "now", fake_clock)
    return fake_clock


def _stdout_lines(capsys, *args: str) -> tuple[int, list[str]]:
    from lab.__main__ import main

    capsys.readouterr()
    rc = main(list(args))
    return rc, capsys.readouterr().out.strip().splitlines()


def test_a_run_with_a_budget_stops_between_experiments_and_says_how_to_continue(tmp_path: Path, capsys, fake,
                                                                                clock) -> None:
    from lab.run.budget import EXIT_STOPPED

    for eid in THREE:
        fake(eid, clock.takes(100))
    out = tmp_path / "run"
    args = ("run", "--profile", "smoke", "--only", ",".join(THREE), "--out", str(out), "--stop-after", "150",
            "--set", "recompiles.batch_sizes=1,2")
    rc, lines = _stdout_lines(capsys, *args)
    assert rc == EXIT_STOPPED == 75
    saved = load(out)
    # graph_breaks ends at 100 s (within 150), recompiles may start (its length unknown), decode_recompiles not
    assert saved.run.state == "stopped" and [(r.id, r.status) for r in saved.experiments] == [
        ("graph_breaks", "OK"), ("recompiles", "OK")]  # the one not started has no record: it was not attempted
    stop = saved.run.starts[-1].stop
    assert stop.code == "stop_after" and stop.next == "decode_recompiles" and stop.not_started == ["decode_recompiles"]
    assert stop.budget_s == 150 and stop.elapsed_s == 200 and stop.expected_s is None
    assert saved.run.starts[-1].stop_after_s == 150
    assert lines[-2].startswith(f"{out / 'results.json'}: 2 OK, 0 NOT_RUN, 0 FAILED")
    assert lines[-1].startswith("stopped at --stop-after 150 with 1 experiment(s) not started; continue with: ")
    again = shlex.split(lines[-1].split("continue with: ", 1)[1])
    assert again[:4] == [sys.executable, "-m", "lab", "run"]
    assert again[4:] == ["--profile", "smoke", "--out", str(out), "--resume", "--only", ",".join(THREE),
                         "--stop-after", "150", "--set", "recompiles.batch_sizes=1,2"]

    rc, lines = _stdout_lines(capsys, *again[3:])  # the command it printed, as it printed it
    assert rc == 0 and lines[-1].startswith(f"{out / 'results.json'}: 3 OK, 0 NOT_RUN, 0 FAILED")
    done = load(out)
    assert done.run.state == "complete" and [r.status for r in done.experiments] == ["OK"] * 3
    assert [s.kept for s in done.run.starts] == [[], ["graph_breaks", "recompiles"]]
    assert done.run.starts[0].stop.next == "decode_recompiles" and done.run.starts[1].stop is None


def test_a_resume_expects_what_an_experiment_took_before_and_keeps_its_record_until_it_runs(tmp_path: Path, capsys,
                                                                                           fake, clock) -> None:
    from lab.contract.results import save

    def fails(ctx) -> None:
        raise RuntimeError("first attempt")

    fake("graph_breaks", fails)
    fake("recompiles", fails)
    fake("decode_recompiles", one_compile)
    out = tmp_path / "run"
    runner.run(SMOKE, out, only=THREE)
    first = load(out)
    first.record("graph_breaks").duration_s = 5.0
    first.record("recompiles").duration_s = 300.0  # what that attempt took, as an H200 would have recorded it
    save(first, out)

    fake("graph_breaks", clock.takes(50))
    fake("recompiles", clock.takes(10))
    rc, lines = _stdout_lines(capsys, "run", "--profile", "smoke", "--out", str(out), "--resume",
                              "--stop-after", "200")
    assert rc == 75
    saved = load(out)
    stop = saved.run.starts[-1].stop
    # 50 s spent of 200: time is left, but recompiles took 300 s before, so it is not started
    assert stop.next == "recompiles" and stop.expected_s == 300.0 and stop.elapsed_s == 50.0
    assert "recompiles took 300 s in an earlier start" in stop.message
    assert [(r.id, r.status) for r in saved.experiments] == [("graph_breaks", "OK"), ("recompiles", "FAILED"),
                                                            ("decode_recompiles", "OK")]
    assert "first attempt" in saved.record("recompiles").reason.message  # the earlier start's record, kept
    assert "--resume" in lines[-1] and "--stop-after 200" in lines[-1]


def test_a_start_runs_its_first_experiment_whatever_the_budget_and_strict_does_not_hide_the_stop(
        tmp_path: Path, capsys, fake, clock) -> None:
    def fails(ctx) -> None:
        clock.t += 10
        raise RuntimeError("boom")

    fake("graph_breaks", fails)
    fake("recompiles", clock.takes(10))
    out = tmp_path / "run"
    rc, lines = _stdout_lines(capsys, "run", "--profile", "smoke", "--only", "graph_breaks,recompiles", "--out",
                              str(out), "--stop-after", "1", "--strict")
    assert rc == 75  # stopped, not finished: --strict's 1 comes when the run is complete
    assert [(r.id, r.status) for r in load(out).experiments] == [("graph_breaks", "FAILED")]
    assert lines[-1].endswith("--stop-after 1 --strict")


@pytest.mark.parametrize("value", ["0", "-3", "ten", "inf"])
def test_a_bad_stop_after_is_one_line_and_exit_2(tmp_path: Path, capsys, value: str) -> None:
    from cli_helpers import one_line_error

    err = one_line_error(capsys, "run", "--profile", "smoke", "--only", "toolchain", "--out", str(tmp_path / "r"),
                         f"--stop-after={value}")
    assert f"--stop-after {value!r}" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("interrupt", [False, True])
def test_what_an_experiment_keeps_open_lives_to_a_later_one_and_is_closed_at_the_runs_end(tmp_path: Path, fake,
                                                                                           interrupt: bool) -> None:
    """An experiment keeps something open for a later one (the sentinel's fresh processes, lab.run.context
    ModelCache.keep): the later one finds it still open; the run's end closes it, an interrupted run too."""
    import contextlib

    events: list[str] = []

    @contextlib.contextmanager
    def opened():
        events.append("open")
        yield "child"
        events.append("closed")

    def first(ctx) -> None:
        assert ctx.keep("probe", opened()) == "child"

    def later(ctx) -> None:
        events.append(f"found {ctx.kept('probe')}, {events[-1]}")
        if interrupt:
            raise KeyboardInterrupt

    fake("graph_breaks", first)
    fake("recompiles", later)
    fake("decode_recompiles", one_compile)
    with contextlib.suppress(KeyboardInterrupt):
        runner.run(SMOKE, tmp_path, only=THREE)
    assert events == ["open", "found child, open", "closed"]
