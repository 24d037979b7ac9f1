"""lab/host/scheduler.py: the scheduler's ids from Slurm's and Kubernetes' variables, none outside."""

from __future__ import annotations

from lab.host.scheduler import scheduler_info


def test_scheduler_info_from_slurm_and_kubernetes_and_none_outside():
    slurm_env = {"SLURM_JOB_ID": "7", "SLURM_ARRAY_JOB_ID": "6", "SLURM_ARRAY_TASK_ID": "1", "SLURMD_NODENAME": "gpu3",
                 "SLURM_JOB_PARTITION": "h200", "LAB_FLEET_TARGET": "gpu-cuda"}
    info = scheduler_info(slurm_env)
    assert info == {"kind": "slurm", "job_id": "7", "array_job_id": "6", "array_task_id": "1", "node": "gpu3",
                    "partition": "h200", "fleet": {"target": "gpu-cuda"}}
    k = scheduler_info({"JOB_COMPLETION_INDEX": "0", "LAB_NODE_NAME": "node-a", "LAB_POD_NAME": "p-0"})
    assert k["kind"] == "kubernetes" and k["node"] == "node-a" and k["completion_index"] == "0"
    assert scheduler_info({"PATH": "/bin"}) is None
