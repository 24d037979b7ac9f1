"""What the images do, asserted from the results that .ci/docker.sh leaves in $LAB_DOCKER_RESULTS.

`cpu` must not come back NOT_RUN for a toolchain reason on any Inductor-on-CPU item (some may still
be `not_implemented` while the lab grows); `cpu-nocc` must come back NOT_RUN: no_cxx_compiler on
every one of them. The ids are derived from the catalogue (needs `inductor` or `cxx`), not listed.
Locally, without the variable, these tests skip with a reason; in CI (CI=true) missing results fail.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lab.contract.catalogue import CATALOGUE
from lab.containers.lock import freeze_drift
from lab.contract.results import load

REPO = Path(__file__).resolve().parents[2]

TOOLCHAIN_CODES = {"no_cxx_compiler", "compiler_not_on_path", "no_python_headers"}
INDUCTOR_CPU_IDS = [s.id for s in CATALOGUE if {"inductor", "cxx"} & set(s.needs)]


def results_dir() -> Path:
    env = os.environ.get("LAB_DOCKER_RESULTS")
    if not env:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but LAB_DOCKER_RESULTS is unset: .ci/run must run .ci/docker.sh first")
        pytest.skip("LAB_DOCKER_RESULTS unset: run .ci/docker.sh (installs Docker, builds cpu and cpu-nocc) to check")
    return Path(env)


def results_of(variant: str):
    path = results_dir() / variant / "results.json"
    if not path.is_file():
        pytest.fail(f"{path}: missing; the smoke run in graph-lab:{variant} did not produce it (see .ci/docker.sh)")
    return load(path)


def probe_of(variant: str) -> dict:
    path = results_dir() / variant / "inductor_probe.json"
    if not path.is_file():
        pytest.fail(f"{path}: missing; the Inductor probe in graph-lab:{variant} did not run")
    return json.loads(path.read_text())


def test_the_catalogue_has_inductor_on_cpu_items():
    assert {"inductor", "compile_cost", "fusion", "gemm_bound", "amdahl"} <= set(INDUCTOR_CPU_IDS)


@pytest.mark.parametrize("variant", ["cpu", "cpu-nocc"])
def test_manifest_names_image_variant_and_commit(variant):
    res = results_of(variant)
    c = res.manifest["container"]
    assert c["in_container"] is True
    assert c["image"] == f"graph-lab:{variant}"
    assert c["variant"] == variant
    assert str(c["image_id"]).startswith("sha256:"), c["image_id"]
    assert c["fallback_reason"] is None
    assert res.manifest["lab"]["source"] == "LAB_COMMIT" and res.manifest["lab"]["commit"] not in (None, "unknown")
    assert res.run.state == "complete"


def test_cpu_image_runs_inductor_items_without_toolchain_reasons():
    res = results_of("cpu")
    by_id = {r.id: r for r in res.experiments}
    for exp_id in INDUCTOR_CPU_IDS:
        rec = by_id[exp_id]
        if rec.status == "NOT_RUN":
            assert rec.reason is not None and rec.reason.code not in TOOLCHAIN_CODES, (exp_id, rec.reason)
    tc = res.manifest["toolchain"]["cxx"]
    assert tc["compiler"] and tc["python_h"], tc


def test_cpu_nocc_image_reports_no_cxx_compiler():
    res = results_of("cpu-nocc")
    by_id = {r.id: r for r in res.experiments}
    for exp_id in INDUCTOR_CPU_IDS:
        rec = by_id[exp_id]
        assert rec.status == "NOT_RUN" and rec.reason is not None, (exp_id, rec.status)
        assert rec.reason.code == "no_cxx_compiler", (exp_id, rec.reason)
        assert "apt-get install g++" in rec.reason.message
    # Nothing else broke for want of a compiler: no record is FAILED.
    assert [r.id for r in res.experiments if r.status == "FAILED"] == []


def test_inductor_really_compiles_in_cpu_and_not_in_cpu_nocc():
    cpu, nocc = probe_of("cpu"), probe_of("cpu-nocc")
    assert cpu["compiled"] is True and cpu["equal"] is True and cpu["toolchain_reason"] is None, cpu
    assert nocc["compiled"] is False and nocc["toolchain_reason"]["code"] == "no_cxx_compiler", nocc


def test_images_report_lists_both_builds():
    report = json.loads((results_dir() / "images.json").read_text())
    status = {i["variant"]: i["status"] for i in report["images"]}
    assert status == {"cpu": "OK", "cpu-nocc": "OK", "windows-msvc": "NOT_RUN"}
    (win,) = [i for i in report["images"] if i["variant"] == "windows-msvc"]
    assert win["reason"]["code"] == "windows_host_required" and "--target windows-msvc" in win["reason"]["message"]
    ids = {i["variant"]: i["image_id"] for i in report["images"]}
    for variant in ("cpu", "cpu-nocc"):
        assert results_of(variant).manifest["container"]["image_id"] == ids[variant]


def test_cuda_lock_resolves_and_its_difference_from_the_h200_reference_is_stated():
    """The cuda Dockerfile's resolve stage: every package of lock-cuda.txt, with its hash, from index metadata;
    the build report says where the image's environment differs from the H200 reference run."""
    path = results_dir() / "images-cuda.json"
    if not path.is_file():
        pytest.fail(f"{path}: missing; the cuda-resolve build did not run")
    (entry,) = json.loads(path.read_text())["images"]
    assert entry["status"] == "OK", entry
    env = entry["environment"]
    assert env["reference"].startswith("manifests/reference/h200-")
    assert {d["field"]: d["reference"] for d in env["differs"]}.get("python.version") == "3.12.3"
    assert not [d for d in env["differs"] if d["field"] in ("torch.version", "libraries.transformers")]


def check_of(variant: str) -> dict:
    path = results_dir() / variant / "image-check.json"
    if not path.is_file():
        pytest.fail(f"{path}: missing; `python -m lab image-check {variant}` did not run (see .ci/docker.sh)")
    return json.loads(path.read_text())


@pytest.mark.parametrize("variant", ["cpu", "cpu-nocc"])
def test_the_images_packages_are_exactly_the_lock(variant):
    """`pip freeze --all` run in the image against docker/lock-cpu.txt, recomputed here: drift fails."""
    facts = check_of(variant)
    drift = freeze_drift(facts["freeze"], (REPO / "docker" / "lock-cpu.txt").read_text())
    assert not drift, drift.describe()
    assert "graph-lab" in facts["freeze"]


@pytest.mark.parametrize("variant", ["cpu", "cpu-nocc"])
def test_the_image_behaves_on_any_host(variant):
    facts = check_of(variant)
    assert facts["problems"] == [], facts["problems"]
    bare = facts["bare_run"]  # `docker run IMAGE`: the lab's help with the command that runs it, exit 0
    assert bare["exit"] == 0 and bare["stdout"].startswith("usage: python -m lab") and "Traceback" not in bare["stderr"]
    assert f"-v \"$PWD/runs:/out\" graph-lab:{variant} run --profile cpu --out /out" in bare["stdout"]
    denied = facts["unwritable_out"]  # a mounted /out the image's user may not write: one line, exit 2
    assert denied["exit"] == 2 and "Traceback" not in denied["stderr"], denied
    (line,) = denied["stderr"].strip().splitlines()
    assert line.startswith("error: /out") and "permission denied for uid 1000" in line and "chown 1000" in line
    assert facts["apt_caches"] == [] and "bookworm-security" in facts["apt_sources"] and facts["user"] == "1000"
    assert facts["dangling_lab_images"] == []


def test_a_base_image_that_cannot_be_pulled_says_how_to_make_one():
    (entry,) = json.loads((results_dir() / "images-no-base.json").read_text())["images"]
    assert entry["status"] == "NOT_RUN" and entry["reason"]["code"] == "base_image_unavailable"
    assert "python -m lab base-image" in entry["reason"]["message"]
