"""The smoke profile end to end: whole runs through the real CLI in a fresh process."""

from __future__ import annotations

import subprocess
import sys

from pathlib import Path

import pytest

from lab.run.manifest import REPO_ROOT
from lab.contract.results import load


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
