"""lab/run/runner.py: statuses, reasons, atomic partial results, a failure or an interrupt never loses the run."""

from __future__ import annotations

import os
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
    core = [s for s in catalogue.CATALOGUE if not s.sweep]  # the sweeps have a profile of their own (gpu-sweep)
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
