"""lab/fleet/task.py (and finish.py's summary): a task runs its target, records its outcome; a pod finds its target."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from lab.fleet.finish import finish
from lab.fleet.plan import Plan, Target, make_targets
from lab.fleet.task import command, run_task

REPO = Path(__file__).resolve().parent.parent


def plan_for(tmp_path: Path, targets: list[Target]) -> Plan:
    return Plan(results=str(tmp_path), repo=str(REPO), python=sys.executable, host_python=sys.executable,
                targets=targets)


def test_a_task_runs_host_targets_in_place_and_image_targets_through_docker(tmp_path):
    plan = plan_for(tmp_path, make_targets(["smoke"], ["host", "cpu"], only="toolchain"))
    host = command(plan.target(0), tmp_path / "o", plan, {})
    assert host[:4] == [sys.executable, "-m", "lab", "run"] and host[-2:] == ["--only", "toolchain"]
    image = command(plan.target(1), tmp_path / "o", plan, {})
    assert image[3:7] == ["image-run", "--variant", "cpu", "--require-container"]
    inside = command(plan.target(1), tmp_path / "o", None, {"LAB_IMAGE_VARIANT": "cpu"})  # a pod of that image
    assert inside[3] == "run"


def test_a_task_records_its_outcome_and_the_summary_says_what_did_not_land(tmp_path):
    """Target 0 runs a stand-in interpreter that writes a complete results.json; target 1 fails; 2 never ran."""
    fake = tmp_path / "fake-python"
    fake.write_text("#!/bin/sh\nwhile [ \"$1\" != --out ]; do shift; done\nmkdir -p \"$2\"\n"
                    "echo '{\"run\": {\"state\": \"complete\"}, \"experiments\": []}' > \"$2/results.json\"\n")
    fake.chmod(0o755)
    plan = plan_for(tmp_path / "fleet", make_targets(["smoke", "cpu"], ["host"]) + [Target(2, "gpu", "host")])
    plan.python = str(fake)
    plan.save()
    env = {"SLURM_JOB_ID": "41", "SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "0", "SLURMD_NODENAME": "n1"}
    assert run_task(tmp_path / "fleet", environ=env) == 0
    status = json.loads((tmp_path / "fleet" / "tasks" / "0.json").read_text())
    assert status["exit_code"] == 0 and status["host"] == "n1"
    assert status["scheduler"]["array_job_id"] == "40" and status["scheduler"]["fleet"]["target"] == "smoke-host"
    plan.python = "/nonexistent/python"
    plan.save()
    assert run_task(tmp_path / "fleet", index=1, environ={**env, "SLURM_ARRAY_TASK_ID": "1"}) == 127
    summary = finish(tmp_path / "fleet", log=lambda *_: None)
    by = {t["name"]: t for t in summary["targets"]}
    assert by["smoke-host"]["status"] == "landed" and by["smoke-host"]["run_dir"].endswith("runs/n1--smoke-host")
    assert by["cpu-host"]["status"] == "failed" and "exited with 127" in by["cpu-host"]["why"]
    assert by["gpu-host"]["status"] == "missing" and "never reported" in by["gpu-host"]["why"]
    assert summary["landed"] == 1 and json.loads((tmp_path / "fleet" / "fleet-report.json").read_text())["total"] == 3


def test_a_pod_task_finds_its_target_by_completion_index(tmp_path):
    targets = make_targets(["smoke", "cpu"], ["cpu"])
    env = {"LAB_FLEET_TARGETS": json.dumps([t.__dict__ for t in targets]), "JOB_COMPLETION_INDEX": "1",
           "LAB_NODE_NAME": "node-b", "LAB_IMAGE_VARIANT": "cpu"}
    from lab.fleet.task import find_target

    target, plan = find_target(tmp_path, env, None)
    assert target.name == "cpu-cpu" and plan is None
