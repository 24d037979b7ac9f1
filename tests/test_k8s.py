"""lab/fleet/k8s.py: the Kubernetes manifest, one indexed Job per image and selector."""

from __future__ import annotations

import json

import pytest
import yaml

from lab.fleet import k8s
from lab.fleet.plan import make_targets


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
