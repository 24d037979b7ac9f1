"""The fleet for clusters without Slurm: Kubernetes Indexed Jobs, one per (image, node selector, GPU).

Each Job runs its targets as completion indexes 0..n-1 in the target's image: `python -m lab fleet-task
/results` finds its target in LAB_FLEET_TARGETS by JOB_COMPLETION_INDEX and writes the run to
/results/runs/<node>--<target> on a shared volume (a PersistentVolumeClaim). A Kubernetes pod always
runs an image, so `host` targets and Slurm partitions have no meaning here (one-line errors);
constraints of the form LABEL=VALUE become node selectors. The YAML is written with the standard
library (block style, every string quoted as JSON, which YAML reads the same).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from typing import Any

from lab.containers.variants import IMAGE_UID
from lab.fleet.plan import Target
from lab.fleet.task import TARGETS_ENV

RESULTS_MOUNT = "/results"


def node_selector(constraint: str | None) -> dict[str, str]:
    if constraint is None:
        return {}
    m = re.fullmatch(r"([A-Za-z0-9./_-]+)=([A-Za-z0-9._-]*)", constraint)
    if not m:
        raise ValueError(f"--constraint {constraint}: for Kubernetes give a node label as LABEL=VALUE "
                         "(e.g. nvidia.com/gpu.product=NVIDIA-H200)")
    return {m.group(1): m.group(2)}


def job(name: str, image: str, targets: list[Target], claim: str, gpus: int, selector: dict[str, str],
        cpus: int) -> dict[str, Any]:
    env = [{"name": TARGETS_ENV, "value": json.dumps([asdict(t) for t in targets])},
           {"name": "LAB_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
           {"name": "LAB_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
           {"name": "LAB_JOB_NAME", "value": name}]
    resources: dict[str, Any] = {"requests": {"cpu": str(cpus)}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": gpus}
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        # The images' user; fsGroup makes the results volume writable for it.
        "securityContext": {"runAsUser": IMAGE_UID, "runAsGroup": IMAGE_UID, "fsGroup": IMAGE_UID},
        "containers": [{"name": "lab", "image": image, "command": ["python", "-m", "lab", "fleet-task", RESULTS_MOUNT],
                        "env": env, "resources": resources,
                        "volumeMounts": [{"name": "results", "mountPath": RESULTS_MOUNT}]}],
        "volumes": [{"name": "results", "persistentVolumeClaim": {"claimName": claim}}],
    }
    if selector:
        pod["nodeSelector"] = selector
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"app": "graph-lab-fleet"}},
            "spec": {"completionMode": "Indexed", "completions": len(targets), "parallelism": len(targets),
                     "backoffLimit": 0, "template": {"metadata": {"labels": {"app": "graph-lab-fleet"}}, "spec": pod}}}


def jobs(targets: list[Target], image_prefix: str, claim: str, gpus: int, cpus: int, name: str) -> list[dict[str, Any]]:
    """One Indexed Job per (variant, constraint); refuses what a pod cannot honour."""
    for t in targets:
        if not t.in_image:
            raise ValueError(f"target {t.name}: a Kubernetes pod runs an image; `host` targets need Slurm")
        if t.partition:
            raise ValueError(f"target {t.name}: Kubernetes has no partitions; select nodes with "
                             "--constraint LABEL=VALUE")
    grouped: dict[tuple[str, str | None], list[Target]] = {}
    for t in targets:
        grouped.setdefault((t.variant, t.constraint), []).append(t)
    return [job(f"{name}-{k}", f"{image_prefix}:{variant}", group, claim, gpus if any(t.gpu for t in group) else 0,
                node_selector(constraint), cpus) for k, ((variant, constraint), group) in enumerate(grouped.items())]


def manifest(docs: list[dict[str, Any]]) -> str:
    """The documents as one YAML stream, each written as JSON (valid YAML: kubectl reads it as is)."""
    return "".join(f"---\n{json.dumps(d, indent=2)}\n" for d in docs)
