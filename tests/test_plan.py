"""lab/fleet/plan.py: the targets, the plan written and read back, run folders named by host and target."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lab.fleet.plan import Plan, Target, load_plan, make_targets, run_dir

REPO = Path(__file__).resolve().parent.parent


def test_targets_are_the_product_in_order():
    ts = make_targets(["smoke", "gpu"], ["host", "cuda"], ["a100", "h200"], None, "toolchain")
    assert [t.index for t in ts] == list(range(8))
    assert ts[0] == Target(0, "smoke", "host", "a100", None, "toolchain")
    assert ts[-1].name == "gpu-cuda-h200" and ts[-1].gpu and not ts[0].gpu and ts[0].name == "smoke-host-a100"


@pytest.mark.parametrize("args,message", [
    ((["turbo"], ["host"]), "--profile turbo: unknown"),
    ((["smoke"], ["windows-msvc"]), "--variant windows-msvc: unknown or not runnable"),
    ((["smoke"], ["cpu", "cpu"]), "the same target is listed twice: smoke-cpu"),
])
def test_bad_targets_are_one_line_errors(args, message):
    with pytest.raises(ValueError, match=message):
        make_targets(*args)


def plan_for(tmp_path: Path, targets: list[Target]) -> Plan:
    return Plan(results=str(tmp_path), repo=str(REPO), python=sys.executable, host_python=sys.executable,
                targets=targets)


def test_the_plan_round_trips_and_names_run_folders_by_host_and_target(tmp_path):
    plan = plan_for(tmp_path, make_targets(["smoke"], ["host", "cpu"]))
    plan.save()
    again = load_plan(tmp_path)
    assert again.targets == plan.targets and again.target(1).variant == "cpu"
    assert run_dir(tmp_path, "node7", again.target(1)) == tmp_path / "runs" / "node7--smoke-cpu"
    with pytest.raises(ValueError, match="no target with index 5"):
        again.target(5)
    (tmp_path / "fleet.json").write_text("{}")
    with pytest.raises(ValueError, match="not a fleet plan"):
        load_plan(tmp_path)
