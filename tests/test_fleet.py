"""The fleet without a cluster: targets, the plan, sbatch scripts, the Kubernetes manifest, a task, the summary.

tests/test_fleet_slurm.py submits a real job array to a Slurm cluster (CI starts one).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lab.containers.run import run_command
from lab.containers.variants import VARIANTS
from lab.fleet import k8s, slurm
from lab.fleet.finish import finish
from lab.fleet.plan import Plan, Target, load_plan, make_targets, run_dir
from lab.host.scheduler import scheduler_info
from lab.fleet.task import command, run_task

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


def test_scheduler_info_from_slurm_and_kubernetes_and_none_outside():
    slurm_env = {"SLURM_JOB_ID": "7", "SLURM_ARRAY_JOB_ID": "6", "SLURM_ARRAY_TASK_ID": "1", "SLURMD_NODENAME": "gpu3",
                 "SLURM_JOB_PARTITION": "h200", "LAB_FLEET_TARGET": "gpu-cuda"}
    info = scheduler_info(slurm_env)
    assert info == {"kind": "slurm", "job_id": "7", "array_job_id": "6", "array_task_id": "1", "node": "gpu3",
                    "partition": "h200", "fleet": {"target": "gpu-cuda"}}
    k = scheduler_info({"JOB_COMPLETION_INDEX": "0", "LAB_NODE_NAME": "node-a", "LAB_POD_NAME": "p-0"})
    assert k["kind"] == "kubernetes" and k["node"] == "node-a" and k["completion_index"] == "0"
    assert scheduler_info({"PATH": "/bin"}) is None


def test_a_container_run_sees_the_scheduler_ids_and_the_hosts_name(tmp_path):
    cmd = run_command(VARIANTS["cpu"], ["run"], tmp_path, image_ref="sha256:x", host_uid=0, host_gid=0,
                      environ={"SLURM_JOB_ID": "9", "SLURMD_NODENAME": "n2", "UNRELATED": "x"})
    assert "SLURM_JOB_ID=9" in cmd and "SLURMD_NODENAME=n2" in cmd and not any("UNRELATED" in c for c in cmd)
    assert cmd[cmd.index("--hostname") + 1]


def test_the_kubernetes_manifest_is_one_indexed_job_per_image_and_selector(tmp_path):
    targets = make_targets(["smoke", "gpu"], ["cpu", "cuda"], None, ["nvidia.com/gpu.product=NVIDIA-H200"])
    out = tmp_path / "fleet.yaml"
    out.write_text(k8s.manifest(k8s.jobs(targets, "registry.example/graph-lab", "lab-results", 1, 2, "lab")))
    docs = list(yaml.safe_load_all(out.read_text()))
    assert [d["metadata"]["name"] for d in docs] == ["lab-0", "lab-1"]
    for doc, variant in zip(docs, ["cpu", "cuda"]):
        assert doc["apiVersion"] == "batch/v1" and doc["kind"] == "Job"
        spec = doc["spec"]
        assert spec["completionMode"] == "Indexed" and spec["completions"] == 2 == spec["parallelism"]
        pod = spec["template"]["spec"]
        assert pod["restartPolicy"] == "Never" and pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
        assert pod["securityContext"]["fsGroup"] == 1000
        (c,) = pod["containers"]
        assert c["image"] == f"registry.example/graph-lab:{variant}"
        assert c["command"] == ["python", "-m", "lab", "fleet-task", "/results"]
        env = {e["name"]: e for e in c["env"]}
        carried = json.loads(env["LAB_FLEET_TARGETS"]["value"])
        assert [t["variant"] for t in carried] == [variant, variant] and [t["profile"] for t in carried] == ["smoke", "gpu"]
        assert env["LAB_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
        assert c["volumeMounts"] == [{"name": "results", "mountPath": "/results"}]
        assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "lab-results"
    assert docs[1]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1}


@pytest.mark.parametrize("targets,message", [
    (make_targets(["smoke"], ["host"]), "host` targets need Slurm"),
    (make_targets(["smoke"], ["cpu"], ["debug"]), "Kubernetes has no partitions"),
    (make_targets(["smoke"], ["cpu"], None, ["h200"]), "give a node label as LABEL=VALUE"),
])
def test_the_kubernetes_manifest_refuses_what_a_pod_cannot_honour(targets, message):
    with pytest.raises(ValueError, match=message):
        k8s.jobs(targets, "graph-lab", "c", 1, 1, "lab")


def test_a_pod_task_finds_its_target_by_completion_index(tmp_path):
    targets = make_targets(["smoke", "cpu"], ["cpu"])
    env = {"LAB_FLEET_TARGETS": json.dumps([t.__dict__ for t in targets]), "JOB_COMPLETION_INDEX": "1",
           "LAB_NODE_NAME": "node-b", "LAB_IMAGE_VARIANT": "cpu"}
    from lab.fleet.task import find_target

    target, plan = find_target(tmp_path, env, None)
    assert target.name == "cpu-cpu" and plan is None


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
