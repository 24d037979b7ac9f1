"""lab/fleet/slurm.py: one job array per partition and constraint, the report job after them, no sbatch is one line.

tests/e2e/test_fleet_slurm.py submits a real job array to a Slurm cluster (CI starts one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lab.fleet import slurm
from lab.fleet.plan import Plan, Target, make_targets

REPO = Path(__file__).resolve().parent.parent


def plan_for(tmp_path: Path, targets: list[Target]) -> Plan:
    return Plan(results=str(tmp_path), repo=str(REPO), python=sys.executable, host_python=sys.executable,
                targets=targets)


def test_one_array_per_partition_and_constraint_with_the_targets_own_indices(tmp_path):
    plan = plan_for(tmp_path, make_targets(["smoke", "gpu"], ["cuda"], ["a100", "h200"]))
    groups = slurm.groups(plan.targets)
    assert [(p, g, [t.index for t in ts]) for p, _, g, ts in groups] == [
        ("a100", True, [0, 2]), ("h200", True, [1, 3])]
    script = slurm.array_script(plan, *groups[1], slurm.SlurmOptions(cpus_per_task=4, extra=("--account=lab",)))
    for line in ("#SBATCH --array=1,3", "#SBATCH --partition=h200", "#SBATCH --gres=gpu:1",
                 "#SBATCH --cpus-per-task=4", "#SBATCH --account=lab", f"#SBATCH --chdir={REPO}",
                 f"#SBATCH --output={tmp_path}/slurm/%A_%a.out"):
        assert line in script.splitlines(), line
    assert script.rstrip().endswith(f"-m lab fleet-task {tmp_path}")
    report = slurm.report_script(plan, ["11", "12"])
    assert "#SBATCH --dependency=afterany:11:12" in report and f"-m lab fleet-report {tmp_path}" in report
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)  # valid shell


def test_without_sbatch_the_fleet_is_one_line_and_leaves_no_scripts(tmp_path, monkeypatch, capsys):
    from lab.__main__ import main

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no sbatch anywhere
    results = tmp_path / "results"
    rc = main(["fleet", "--results", str(results), "--profile", "smoke", "--variant", "host"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("error: sbatch is not on PATH") and "\n" not in err
    assert not (results / "slurm").exists()
    plan = Plan(results=str(results), repo=str(REPO), python="python3", host_python="python3",
                targets=make_targets(["smoke"], ["host"], None, None, None))
    with pytest.raises(ValueError, match="sbatch is not on PATH"):
        slurm.submit(plan, slurm.SlurmOptions())
    assert not (results / "slurm").exists()
