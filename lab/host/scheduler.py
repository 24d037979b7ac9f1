"""Which batch scheduler started this process, with its ids and node: what a fleet run's manifest records.

Read from the environment the schedulers set (Slurm's SLURM_* variables; a Kubernetes Indexed Job's
JOB_COMPLETION_INDEX plus the node name the lab's manifest passes down as LAB_NODE_NAME), and the
fleet's own LAB_FLEET_* variables. Inside a container the fleet forwards these variables. None when
no scheduler started the run.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

SLURM = {"job_id": "SLURM_JOB_ID", "array_job_id": "SLURM_ARRAY_JOB_ID", "array_task_id": "SLURM_ARRAY_TASK_ID",
         "node": "SLURMD_NODENAME", "partition": "SLURM_JOB_PARTITION", "cluster": "SLURM_CLUSTER_NAME",
         "job_name": "SLURM_JOB_NAME"}
KUBERNETES = {"completion_index": "JOB_COMPLETION_INDEX", "node": "LAB_NODE_NAME", "pod": "LAB_POD_NAME",
              "job_name": "LAB_JOB_NAME"}
FLEET = {"target": "LAB_FLEET_TARGET", "index": "LAB_FLEET_INDEX", "results": "LAB_FLEET_RESULTS"}
# What a container run of a fleet task must see of its host's environment (lab.containers.run forwards them).
FORWARDED = tuple(SLURM.values()) + tuple(KUBERNETES.values()) + tuple(FLEET.values())


def _pick(env: Mapping[str, str], names: dict[str, str]) -> dict[str, Any]:
    return {key: env[var] for key, var in names.items() if env.get(var)}


def scheduler_info(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """{"kind": "slurm"|"kubernetes", ids..., "fleet": {...}} for a scheduled run, None otherwise."""
    env = os.environ if environ is None else environ
    fleet = _pick(env, FLEET)
    if env.get("SLURM_JOB_ID"):
        return {"kind": "slurm", **_pick(env, SLURM), "fleet": fleet or None}
    if env.get("JOB_COMPLETION_INDEX") is not None and (env.get("LAB_NODE_NAME") or env.get("KUBERNETES_SERVICE_HOST")):
        return {"kind": "kubernetes", **_pick(env, KUBERNETES), "fleet": fleet or None}
    return {"kind": "none", "fleet": fleet} if fleet else None
