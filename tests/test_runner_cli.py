"""The runner and the CLI as a user meets them: statuses, reasons, atomic partial results, bad input."""

from __future__ import annotations

import json
import subprocess
import sys

from pathlib import Path

import pytest

from lab.contract import catalogue, metrics, profiles
from lab.run import runner
from lab.__main__ import main
from lab.run.manifest import REPO_ROOT
from lab.contract.results import load


def test_every_lab_book_id_is_listed(capsys) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    book = (REPO_ROOT.parent / "shared" / "LAB_BOOK.md")
    ids = [s.id for s in catalogue.CATALOGUE]
    for i in ids:
        assert i in out
    if book.exists():
        import re

        listed = set(re.findall(r"^\| `([a-z_]+)` \|", book.read_text(), flags=re.M))
        assert listed <= set(ids), listed - set(ids)


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


def test_cli_bad_input_is_one_line(capsys) -> None:
    assert main(["run", "--profile", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown profile 'nope'") and "\n" not in err
    assert main(["run", "--profile", "smoke", "--only", "warp_drive"]) == 2
    assert "warp_drive" in capsys.readouterr().err
    assert main(["decode", "--profile", "smoke", "--prompt", "1,2", "--prompt", "3", "--steps", "3"]) == 2
    assert "equal lengths" in capsys.readouterr().err


def test_cli_decode_methods_agree(capsys) -> None:
    outs = {}
    for method in ("reference", "growing", "fixed"):
        assert main(["decode", "--profile", "smoke", "--method", method, "--prompt", "464,290,318",
                     "--prompt", "1,2,3", "--steps", "12", "--json"]) == 0
        outs[method] = json.loads(capsys.readouterr().out)["tokens"]
    assert outs["reference"] == outs["growing"] == outs["fixed"]
    assert len(outs["fixed"]) == 2 and len(outs["fixed"][0]) == 12


def test_env_writes_manifest(tmp_path: Path, capsys) -> None:
    out = tmp_path / "m.json"
    assert main(["env", "--profile", "smoke", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    for key in ("torch", "toolchain", "compiler_settings", "inductor_cache_dir", "lab", "container", "packages",
                "weights", "collect_env", "cpu", "gpu"):
        assert key in data, key
    assert data["compiler_settings"]["recompile_limit"]["name"].startswith("torch._dynamo.config.")
    assert data["weights"]["source"] == "random"


@pytest.mark.slow
def test_smoke_core_experiments_end_to_end(tmp_path: Path) -> None:
    """The CPU experiments of the core, through the real CLI in a fresh process."""
    ids = "fixed_step_equivalence,graph_breaks,recompiles,decode_recompiles"
    proc = subprocess.run([sys.executable, "-m", "lab", "run", "--profile", "smoke", "--only", ids, "--out",
                           str(tmp_path)], capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = load(tmp_path)
    assert {r.id: r.status for r in res.experiments} == {i: "OK" for i in ids.split(",")}
    rc = res.record("recompiles")
    assert rc.metric("limit_hit", dynamic="False").value is True
    assert rc.metric("limit_hit", dynamic="True").value is False
    dr = res.record("decode_recompiles")
    assert dr.metric("compiles", step="fixed", dynamic="False").value == 1
    assert dr.metric("compiles", step="growing", dynamic="False").value > 1
    fe = res.record("fixed_step_equivalence")
    assert all(c.passed for c in fe.checks) and len(fe.checks) >= 8
