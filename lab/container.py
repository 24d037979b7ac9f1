"""Container images of the lab: build them, make a base image without a registry, run the lab inside.

Why a module and not shell in the noxfile: the same logic serves `nox -s images`, `nox -s base_image`,
`nox -s cpu_lab` / `gpu_lab` and CI (`.ci/docker.sh` calls `python3 -m lab.container`), and the
tests check the commands it builds without a Docker engine. It imports only the standard library
(and lab.results, itself stdlib-only) so that nox can import it without installing torch.

Rule 1 of the lab applies here too: an image that cannot be built on this host (the Windows one on
Linux, any image without a Docker engine) is reported NOT_RUN with a reason code and a sentence
saying how to make it build, never silently skipped; the lab falling back to the host records the
reason in the manifest (LAB_HOST_FALLBACK).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from lab import __version__
from lab.atomic import write_json_atomic
from lab.reasons import Reason

REPO_ROOT = Path(__file__).resolve().parent.parent
IMAGE_REPO = "graph-lab"
BASE_TAG = "graph-lab-base:bookworm"
CONTEXT_DIR = REPO_ROOT / "build" / "docker-context"
REPORT_PATH = REPO_ROOT / "build" / "images.json"
IMAGE_UID = 1000  # the non-root user `lab` of the Linux images (Dockerfile ARG LAB_UID)


@dataclass(frozen=True)
class Variant:
    """One image: which Dockerfile and stage, where it can be built, and what it is for."""

    name: str
    dockerfile: str  # relative to the repo root
    target: str
    os: str  # "linux" or "windows": the container host OS the image needs
    gpu: bool  # run with the host's GPUs passed through (--gpus all)
    profile: str  # the lab profile the image runs by default
    description: str

    @property
    def tag(self) -> str:
        return f"{IMAGE_REPO}:{self.name}"


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("cpu", "docker/Dockerfile.cpu", "cpu", "linux", False, "cpu",
            "torch 2.13.0 CPU with g++ and python3-dev: Inductor's C++ backend works"),
    Variant("cpu-nocc", "docker/Dockerfile.cpu", "cpu-nocc", "linux", False, "cpu",
            "torch 2.13.0 CPU without any C++ compiler: Inductor-on-CPU items are NOT_RUN: no_cxx_compiler"),
    Variant("cuda", "docker/Dockerfile.cuda", "cuda", "linux", True, "gpu",
            "torch 2.11.0 (CUDA 13.0 wheels) with Triton 3.6: needs only the host driver and NVIDIA container toolkit"),
    Variant("cuda-notriton", "docker/Dockerfile.cuda", "cuda-notriton", "linux", True, "gpu",
            "the cuda image with Triton removed: Inductor-on-GPU items are NOT_RUN: no_triton"),
    # The cuda Dockerfile up to its torch install, as a metadata-only resolution of the same pins:
    # what a host without a GPU and without the multi-GB CUDA wheels can check.
    Variant("cuda-resolve", "docker/Dockerfile.cuda", "resolve", "linux", False, "gpu",
            "the cuda image's packages resolved from index metadata (pip --dry-run): no image to run"),
    Variant("windows-msvc", "docker/Dockerfile.windows", "windows-msvc", "windows", False, "cpu",
            "Windows Server Core with Python 3.11, torch CPU and the MSVC Build Tools (Windows container hosts only)"),
)}
# The variant cpu_lab / gpu_lab run in.
PROFILE_VARIANT = {"cpu": "cpu", "smoke": "cpu", "gpu": "cuda"}


# ----------------------------------------------------------------------------------------- engine
def _run(cmd: Sequence[str], timeout: float = 60) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None


def engine_reason() -> Reason | None:
    """Why no Docker engine can be used from here, or None when `docker info` answers."""
    if shutil.which("docker") is None:
        return Reason("no_docker", "the docker CLI is not on PATH: install Docker (Debian: apt-get install docker.io) "
                                   "and start dockerd")
    out = _run(["docker", "info", "--format", "{{json .}}"], timeout=30)
    if out is None or out.returncode != 0:
        detail = (out.stderr.strip().splitlines() or [""])[0] if out is not None else "docker info timed out"
        return Reason("docker_daemon_unreachable", f"the Docker engine does not answer ({detail}): start dockerd "
                                                   "(or the Docker service) and check you may use its socket")
    return None


def engine_os() -> str | None:
    out = _run(["docker", "info", "--format", "{{.OSType}}"], timeout=30)
    return out.stdout.strip() if out is not None and out.returncode == 0 else None


def gpu_reason() -> Reason | None:
    """Why the host's GPUs cannot be passed to a container, or None (engine with the nvidia runtime/CDI)."""
    out = _run(["docker", "info", "--format", "{{json .Runtimes}}"], timeout=30)
    runtimes = out.stdout if out is not None and out.returncode == 0 else ""
    if "nvidia" not in runtimes and shutil.which("nvidia-container-cli") is None and shutil.which("nvidia-ctk") is None:
        return Reason("no_nvidia_container_toolkit", "the Docker engine has no NVIDIA runtime: install the NVIDIA "
                                                     "Container Toolkit (nvidia-ctk runtime configure) to pass GPUs "
                                                     "with --gpus all")
    return None


def image_id(tag: str) -> str | None:
    out = _run(["docker", "image", "inspect", "--format", "{{.Id}}", tag], timeout=30)
    return out.stdout.strip() if out is not None and out.returncode == 0 and out.stdout.strip() else None


# ----------------------------------------------------------------------------------- provenance
def lab_commit(repo: Path = REPO_ROOT) -> str:
    """HEAD's commit, with `-dirty` when tracked files differ from it (the image holds the working tree)."""
    head = _run(["git", "-C", str(repo), "rev-parse", "HEAD"])
    if head is None or head.returncode != 0:
        return os.environ.get("LAB_COMMIT", "unknown")
    status = _run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"])
    dirty = bool(status and status.stdout.strip())
    return head.stdout.strip() + ("-dirty" if dirty else "")


def tracked_files(repo: Path = REPO_ROOT) -> list[str]:
    out = _run(["git", "-C", str(repo), "ls-files", "-z"])
    if out is None or out.returncode != 0:
        raise FileNotFoundError(f"{repo}: not a git checkout; the image build copies the lab's tracked files")
    return [p for p in out.stdout.split("\0") if p]


# ---------------------------------------------------------------------------------- pip settings
@dataclass
class PipSettings:
    """How the image build reaches Python packages: the host's pip settings, as build options.

    Only network indexes travel into the build (file:// indexes and find-links are host paths); a
    local wheelhouse is copied into the build context instead, and the CA bundle is copied into the
    build stage only (it never reaches the final image).
    """

    index_url: str | None = None
    extra_index_urls: list[str] = field(default_factory=list)
    trusted_hosts: list[str] = field(default_factory=list)
    cert: str | None = None
    wheelhouses: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # settings that cannot travel, with why

    def build_args(self) -> dict[str, str]:
        args = {}
        if self.index_url:
            args["PIP_INDEX_URL"] = self.index_url
        if self.extra_index_urls:
            args["PIP_EXTRA_INDEX_URL"] = " ".join(self.extra_index_urls)
        if self.trusted_hosts:
            args["PIP_TRUSTED_HOST"] = " ".join(self.trusted_hosts)
        return args


def parse_pip_config(text: str) -> dict[str, str]:
    """`pip config list` lines (`global.cert='/x'`, `:env:.find-links='/y'`) -> {key: value}, env last wins."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^([^.=]*)\.([\w-]+)='(.*)'$", line.strip())
        if m:
            values[m.group(2)] = m.group(3)
    return values


def host_pip_settings(config_text: str | None = None, environ: dict[str, str] | None = None) -> PipSettings:
    """The host's pip index, CA bundle and wheelhouse, from `pip config list` and PIP_* variables."""
    env = os.environ if environ is None else environ
    if config_text is None:
        out = _run([sys.executable, "-m", "pip", "config", "list"])
        config_text = out.stdout if out is not None and out.returncode == 0 else ""
    cfg = parse_pip_config(config_text)
    for key in ("index-url", "extra-index-url", "trusted-host", "cert", "find-links"):
        env_key = "PIP_" + key.upper().replace("-", "_")
        if env.get(env_key):
            cfg[key] = env[env_key]
    s = PipSettings()
    for url in cfg.get("index-url", "").split():
        if url.startswith(("http://", "https://")):
            s.index_url = url
        else:
            s.ignored.append(f"index-url {url}: a host path, not reachable from a build")
    for url in cfg.get("extra-index-url", "").split():
        if url.startswith(("http://", "https://")):
            s.extra_index_urls.append(url)
        else:
            s.ignored.append(f"extra-index-url {url}: a host path, not reachable from a build")
    s.trusted_hosts = cfg.get("trusted-host", "").split()
    cert = cfg.get("cert")
    if cert and Path(cert).is_file():
        s.cert = cert
    for loc in cfg.get("find-links", "").split():
        path = loc[len("file://"):] if loc.startswith("file://") else loc
        if Path(path).is_dir():
            s.wheelhouses.append(path)
        else:
            s.ignored.append(f"find-links {loc}: not a local folder")
    return s


# ------------------------------------------------------------------------------------ build context
def stage_context(dest: Path, pip: PipSettings, repo: Path = REPO_ROOT) -> dict[str, object]:
    """Make the build context: src/ (the lab's tracked files), docker/, extra/pip-ca.pem, extra/wheels/.

    Wheels are hard-linked where the file system allows (no copy of a 200 MB torch wheel), and
    files already staged with the same size and mtime are kept, so that Docker's layer cache hits.
    """
    dest.mkdir(parents=True, exist_ok=True)
    src = dest / "src"
    wanted: set[Path] = set()
    for rel in tracked_files(repo):
        source = repo / rel
        if not source.is_file():
            continue  # deleted in the working tree
        wanted.add(src / rel)
        _sync_file(source, src / rel)
    (dest / "docker").mkdir(exist_ok=True)
    for f in (repo / "docker").glob("*"):
        if f.is_file():
            wanted.add(dest / "docker" / f.name)
            _sync_file(f, dest / "docker" / f.name)
    extra = dest / "extra"
    (extra / "wheels").mkdir(parents=True, exist_ok=True)
    if pip.cert:
        wanted.add(extra / "pip-ca.pem")
        _sync_file(Path(pip.cert), extra / "pip-ca.pem")
    wheels = []
    for house in pip.wheelhouses:
        for whl in sorted(Path(house).glob("*.whl")):
            wanted.add(extra / "wheels" / whl.name)
            _sync_file(whl, extra / "wheels" / whl.name, link=True)
            wheels.append(whl.name)
    for f in list(dest.rglob("*")):  # drop what a previous staging left behind
        if f.is_file() and f not in wanted:
            f.unlink()
    return {"files": len(wanted), "wheels": wheels, "cert": bool(pip.cert)}


def _sync_file(source: Path, target: Path, link: bool = False) -> None:
    st = source.stat()
    if target.exists():
        tt = target.stat()
        if tt.st_size == st.st_size and int(tt.st_mtime) == int(st.st_mtime):
            return
        target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    if link:
        try:
            os.link(source, target)
            return
        except OSError:
            pass
    shutil.copy2(source, target)


# ------------------------------------------------------------------------------------------ build
def build_args(variant: Variant, pip: PipSettings, commit: str, base_image: str | None,
               extra: dict[str, str] | None = None) -> dict[str, str]:
    args = {"LAB_COMMIT": commit, "LAB_VERSION": __version__, "LAB_IMAGE": variant.tag, **pip.build_args()}
    if base_image:
        args["BASE_IMAGE"] = base_image
    args.update(extra or {})
    return args


def build_command(variant: Variant, context: Path, args: dict[str, str], network_host: bool = True) -> list[str]:
    """`docker build` for one variant. The legacy builder is used on purpose: it needs no buildx plugin."""
    cmd = ["docker", "build", "--target", variant.target, "-t", variant.tag, "-f", str(context / variant.dockerfile)]
    if network_host:
        cmd += ["--network", "host"]  # apt and pip inside the build use the host's network and proxy
    for key, value in sorted(args.items()):
        cmd += ["--build-arg", f"{key}={value}"]
    return cmd + [str(context)]


@dataclass
class ImageOutcome:
    """One variant's build, in the lab's own terms: OK, NOT_RUN with a reason, or FAILED."""

    variant: str
    status: str
    image: str
    image_id: str | None = None
    reason: dict[str, str] | None = None
    duration_s: float = 0.0
    size_MB: float | None = None


def unbuildable_reason(variant: Variant, host_engine_os: str | None) -> Reason | None:
    if variant.os == "windows" and host_engine_os != "windows":
        return Reason("windows_host_required",
                      f"{variant.name} needs a Windows container host (this engine runs {host_engine_os or 'no OS'}"
                      " containers): build it on Windows Server or Docker Desktop in Windows-containers mode with "
                      "`docker build -f docker/Dockerfile.windows .` (docs/containers.md)")
    if variant.os == "linux" and host_engine_os not in (None, "linux"):
        return Reason("linux_host_required", f"{variant.name} needs a Linux container host")
    return None


def image_size_mb(tag: str) -> float | None:
    out = _run(["docker", "image", "inspect", "--format", "{{.Size}}", tag], timeout=30)
    try:
        return round(int(out.stdout.strip()) / 1e6, 1) if out is not None and out.returncode == 0 else None
    except ValueError:
        return None


def build_images(names: Sequence[str], base_image: str | None = None, pip: PipSettings | None = None,
                 extra_args: dict[str, str] | None = None, report: Path = REPORT_PATH,
                 log=print) -> list[ImageOutcome]:
    """Build the variants asked for; every one ends OK, NOT_RUN (with why) or FAILED, written to `report`."""
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown image variant(s): {', '.join(unknown)} (choose from {', '.join(VARIANTS)})")
    outcomes: list[ImageOutcome] = []
    engine = engine_reason()
    host_os = engine_os() if engine is None else None
    pip = pip or host_pip_settings()
    staged = False
    commit = lab_commit()
    if base_image is None and engine is None and image_id(BASE_TAG):
        base_image = BASE_TAG  # made by `nox -s base_image`: the way to build without a registry
    for name in names:
        variant = VARIANTS[name]
        reason = engine or unbuildable_reason(variant, host_os)
        if reason is not None:
            outcomes.append(ImageOutcome(name, "NOT_RUN", variant.tag, reason=asdict(reason)))
            log(f"{name}: NOT_RUN ({reason.code}: {reason.message})")
            continue
        if not staged:
            info = stage_context(CONTEXT_DIR, pip)
            log(f"build context {CONTEXT_DIR}: {info['files']} files, wheels {info['wheels'] or 'none'}, "
                f"CA bundle {'yes' if info['cert'] else 'no'}" + "".join(f"; ignored {i}" for i in pip.ignored))
            staged = True
        cmd = build_command(variant, CONTEXT_DIR, build_args(variant, pip, commit, base_image, extra_args))
        log("$ " + " ".join(cmd))
        start = time.perf_counter()
        env = {**os.environ, "DOCKER_BUILDKIT": "0"}
        proc = subprocess.run(cmd, env=env)
        took = round(time.perf_counter() - start, 1)
        if proc.returncode != 0:
            outcomes.append(ImageOutcome(name, "FAILED", variant.tag, duration_s=took, reason=asdict(Reason(
                "build_failed", f"docker build exited with {proc.returncode}: see the build log above"))))
            log(f"{name}: FAILED after {took} s")
            continue
        outcomes.append(ImageOutcome(name, "OK", variant.tag, image_id(variant.tag), duration_s=took,
                                     size_MB=image_size_mb(variant.tag)))
        log(f"{name}: OK {variant.tag} in {took} s")
    report.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(report, {"commit": commit, "base_image": base_image or "(Dockerfile default)",
                               "images": [asdict(o) for o in outcomes]})
    return outcomes


# ------------------------------------------------------------------------------------ base image
def debian_mirror(suite: str = "bookworm", sources: Sequence[Path] | None = None) -> str | None:
    """The Debian mirror this host's apt already uses for `suite` (deb822 .sources or one-line .list)."""
    if sources is None:
        d = Path("/etc/apt/sources.list.d")
        sources = [Path("/etc/apt/sources.list"), *sorted(d.glob("*.sources")), *sorted(d.glob("*.list"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    if ":" in line and not line.lstrip().startswith("#"):
                        key, _, value = line.partition(":")
                        fields[key.strip().lower()] = value.strip()
                if fields.get("enabled", "yes").lower() == "no":
                    continue
                if suite in fields.get("suites", "").split() and "deb" in fields.get("types", "").split():
                    return fields.get("uris", "").split()[0] if fields.get("uris") else None
        else:
            for line in text.splitlines():
                parts = line.split("#", 1)[0].split()
                parts = [p for p in parts if not p.startswith("[")] if parts else parts
                if len(parts) >= 3 and parts[0] == "deb" and parts[2] == suite:
                    return parts[1]
    return None


def make_base_image(tag: str = BASE_TAG, suite: str = "bookworm", mirror: str | None = None,
                    force: bool = False, log=print) -> ImageOutcome:
    """A Debian base image from the host's mirror (debootstrap + docker import), for hosts without a registry."""
    engine = engine_reason()
    if engine is not None:
        return ImageOutcome("base", "NOT_RUN", tag, reason=asdict(engine))
    existing = image_id(tag)
    if existing and not force:
        log(f"{tag} exists ({existing[:19]}): reused (force a rebuild with --force)")
        return ImageOutcome("base", "OK", tag, existing, size_MB=image_size_mb(tag))
    if shutil.which("debootstrap") is None:
        return ImageOutcome("base", "NOT_RUN", tag, reason=asdict(Reason(
            "no_debootstrap", "debootstrap is not installed: apt-get install debootstrap (as root)")))
    if os.geteuid() != 0:
        return ImageOutcome("base", "NOT_RUN", tag, reason=asdict(Reason(
            "needs_root", "debootstrap must run as root: rerun this session with sudo")))
    mirror = mirror or debian_mirror(suite)
    if mirror is None:
        return ImageOutcome("base", "NOT_RUN", tag, reason=asdict(Reason(
            "no_debian_mirror", f"no apt source for {suite} on this host: pass --mirror URL")))
    start = time.perf_counter()
    rootfs = REPO_ROOT / "build" / f"rootfs-{suite}"
    _remove_rootfs(rootfs)
    cmd = ["debootstrap", "--variant=minbase", suite, str(rootfs), mirror]
    log("$ " + " ".join(cmd))
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL)
    if proc.returncode != 0:
        return ImageOutcome("base", "FAILED", tag, reason=asdict(Reason(
            "debootstrap_failed", f"debootstrap exited with {proc.returncode} (see /debootstrap/debootstrap.log in "
                                  f"{rootfs})")))
    # debootstrap leaves its package cache; the image needs none of it.
    for cache in (rootfs / "var/cache/apt/archives").glob("*.deb"):
        cache.unlink()
    # What Debian's official images set for builds: dpkg skips fsync (a failed build is simply rerun)
    # and apt keeps no package cache in layers.
    (rootfs / "etc/dpkg/dpkg.cfg.d").mkdir(parents=True, exist_ok=True)
    (rootfs / "etc/dpkg/dpkg.cfg.d/docker-apt-speedup").write_text("force-unsafe-io\n")
    (rootfs / "etc/apt/apt.conf.d/docker-clean").write_text(
        'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb || true"; };\n'
        'Binary::apt::APT::Keep-Downloaded-Packages "false";\n')
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    imp = subprocess.run(["docker", "import", "--change", "CMD [\"/bin/bash\"]", "-", tag], stdin=tar.stdout,
                         capture_output=True, text=True)
    tar.wait()
    _remove_rootfs(rootfs)
    took = round(time.perf_counter() - start, 1)
    if imp.returncode != 0:
        return ImageOutcome("base", "FAILED", tag, duration_s=took, reason=asdict(Reason(
            "import_failed", f"docker import failed: {imp.stderr.strip()[:300]}")))
    log(f"{tag}: made from {mirror} in {took} s")
    return ImageOutcome("base", "OK", tag, image_id(tag), duration_s=took, size_MB=image_size_mb(tag))


def _remove_rootfs(rootfs: Path) -> None:
    """Delete a debootstrap tree, first unmounting what an interrupted debootstrap left mounted in it
    (deleting through a mounted /proc or /dev would reach the host's)."""
    if not rootfs.exists():
        return
    try:
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        mounts = []
    prefix = str(rootfs.resolve()) + "/"
    for point in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False)
    still = [m for m in mounts if m.startswith(prefix) and os.path.ismount(m)]
    if still:
        raise RuntimeError(f"{rootfs}: still mounted ({still[0]}); unmount it by hand before deleting")
    shutil.rmtree(rootfs, ignore_errors=True)


# -------------------------------------------------------------------------------- running the lab
def option_value(args: Sequence[str], name: str) -> str | None:
    """The value of `--name VALUE` or `--name=VALUE` in an argument list."""
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def without_option(args: Sequence[str], name: str) -> list[str]:
    out: list[str] = []
    skip = False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == name:
            skip = i + 1 < len(args)
            continue
        if a.startswith(name + "="):
            continue
        out.append(a)
    return out


def run_command(variant: Variant, lab_args: Sequence[str], out_dir: Path, image_ref: str | None = None,
                host_uid: int | None = None, host_gid: int | None = None) -> list[str]:
    """`docker run` of `python -m lab <lab_args>` in the image, with out_dir mounted at /out.

    The run has no network (the lab downloads nothing; this proves it). A non-root host user runs
    the container under its own uid so that the results belong to it; root runs as the image's
    `lab` user (the session makes out_dir writable for it).
    """
    uid = os.getuid() if host_uid is None else host_uid
    gid = os.getgid() if host_gid is None else host_gid
    args = without_option(lab_args, "--out")
    cmd = ["docker", "run", "--rm", "--network", "none", "--shm-size", "1g",
           "-v", f"{out_dir.resolve()}:/out", "-e", f"LAB_IMAGE_ID={image_ref or image_id(variant.tag) or ''}"]
    weights = option_value(args, "--weights")
    if weights and weights != "random" and Path(weights).exists():
        cmd += ["-v", f"{Path(weights).resolve()}:/weights:ro"]
        args = without_option(args, "--weights") + ["--weights", "/weights"]
    if uid != 0:
        cmd += ["--user", f"{uid}:{gid}", "-e", "HOME=/tmp", "-e", "USER=lab"]
    if variant.gpu:
        cmd += ["--gpus", "all"]
    return cmd + [variant.tag, *args, "--out", "/out"]


def container_plan(profile: str, gpu_needed: bool, variant_name: str | None = None
                   ) -> tuple[Variant | None, Reason | None]:
    """The variant to run `profile` in, or why the lab must run on the host instead."""
    if variant_name is not None and variant_name not in VARIANTS:
        raise ValueError(f"--variant {variant_name}: unknown (choose from {', '.join(VARIANTS)})")
    variant = VARIANTS[variant_name or PROFILE_VARIANT.get(profile, "cpu")]
    if variant.os != "linux":
        return None, Reason("windows_host_required", f"{variant.tag} runs on Windows container hosts only")
    reason = engine_reason()
    if reason is None and engine_os() not in ("linux", None):
        reason = Reason("linux_host_required", f"the Docker engine runs {engine_os()} containers; {variant.tag} "
                                               "is a Linux image")
    if reason is None and image_id(variant.tag) is None:
        reason = Reason("image_missing", f"{variant.tag} is not built here: build it with "
                                         f"`nox -s images -- {variant.name}` to run the lab in its container")
    if reason is None and gpu_needed and variant.gpu:
        reason = gpu_reason()
    return (variant if reason is None else None), reason


def prepare_out_dir(out_dir: Path) -> None:
    """Create out_dir; as root, hand it to the image's non-root user so the container can write it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if os.getuid() == 0:
        os.chown(out_dir, IMAGE_UID, IMAGE_UID)


def run_lab(variant: Variant, lab_args: Sequence[str], out_dir: Path, log=print) -> int:
    prepare_out_dir(out_dir)
    cmd = run_command(variant, lab_args, out_dir)
    log("$ " + " ".join(cmd))
    return subprocess.run(cmd).returncode


def inductor_probe() -> dict[str, object]:
    """Compile one small function with Inductor on the CPU and compare it with eager (run inside an image).

    The smoke profile's Inductor experiments may be unimplemented or NOT_RUN for other reasons; this
    is the direct evidence that the image's C++ toolchain works (or, in cpu-nocc, that it does not).
    """
    import torch  # inside the image only: this module stays importable without torch

    from lab.toolchain import probe

    start = time.perf_counter()
    reason = probe().cxx_reason()
    out: dict[str, object] = {"torch": torch.__version__, "toolchain_reason": asdict(reason) if reason else None}
    try:
        fn = torch.compile(lambda x: torch.sin(x) * 2 + 1, backend="inductor")
        x = torch.linspace(-3, 3, 257)
        out["compiled"] = True
        out["equal"] = bool(torch.allclose(fn(x), torch.sin(x) * 2 + 1))
    except Exception as exc:  # what a user would see: kept verbatim (first line)
        out["compiled"] = False
        out["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:500]
    out["seconds"] = round(time.perf_counter() - start, 2)
    return out


# ------------------------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    """`python -m lab.container images|base-image|run ...` (what the nox sessions and CI call)."""
    p = argparse.ArgumentParser(prog="python -m lab.container", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("images", help="build image variants")
    b.add_argument("variants", nargs="*", default=["cpu"], help=f"any of {', '.join(VARIANTS)}")
    b.add_argument("--base-image", help=f"base image (default: {BASE_TAG} when present, else the Dockerfile's)")
    b.add_argument("--no-host-pip", action="store_true", help="do not pass the host's pip index/CA/wheelhouse")
    b.add_argument("--pip-cert", help="CA bundle for pip inside the build (default: the host pip's cert)")
    b.add_argument("--wheelhouse", action="append", default=[], help="folder of wheels to offer the build")
    b.add_argument("--build-arg", action="append", default=[], metavar="KEY=VALUE", help="extra build argument")
    b.add_argument("--report", type=Path, default=REPORT_PATH, help="where to write the build outcomes")
    bi = sub.add_parser("base-image", help="debootstrap a Debian base from the host's mirror and import it")
    bi.add_argument("--tag", default=BASE_TAG)
    bi.add_argument("--suite", default="bookworm")
    bi.add_argument("--mirror", help="Debian mirror URL (default: the one the host's apt sources name)")
    bi.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    ip = sub.add_parser("inductor-probe", help="compile a tiny function with Inductor (run inside an image)")
    ip.add_argument("--out", type=Path, help="write the outcome as JSON")
    r = sub.add_parser("run", help="run `python -m lab ARGS` (given after --) in a variant's image, "
                                   "the out dir mounted at /out")
    r.add_argument("variant", choices=sorted(VARIANTS))
    r.add_argument("--out", type=Path, required=True, help="host folder for results.json")
    argv = list(sys.argv[1:] if argv is None else argv)
    lab_args: list[str] = []
    if "--" in argv:  # everything after `--` belongs to `python -m lab`
        cut = argv.index("--")
        argv, lab_args = argv[:cut], argv[cut + 1:]
    args = p.parse_args(argv)
    if args.cmd == "images":
        pip = PipSettings() if args.no_host_pip else host_pip_settings()
        if args.pip_cert:
            if not Path(args.pip_cert).is_file():
                raise FileNotFoundError(f"--pip-cert {args.pip_cert}: no such file")
            pip.cert = args.pip_cert
        for house in args.wheelhouse:
            if not Path(house).is_dir():
                raise FileNotFoundError(f"--wheelhouse {house}: no such folder")
            pip.wheelhouses.append(house)
        extra = {}
        for item in args.build_arg:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ValueError(f"--build-arg {item!r}: expected KEY=VALUE")
            extra[key] = value
        outcomes = build_images(args.variants, args.base_image, pip, extra, args.report)
        print(f"{args.report}: " + ", ".join(f"{o.variant} {o.status}" for o in outcomes))
        return 1 if any(o.status == "FAILED" for o in outcomes) else 0
    if args.cmd == "base-image":
        o = make_base_image(args.tag, args.suite, args.mirror, args.force)
        print(f"{o.image}: {o.status}" + (f" ({o.reason['code']}: {o.reason['message']})" if o.reason else ""))
        return 0 if o.status == "OK" else 1
    if args.cmd == "inductor-probe":
        result = inductor_probe()
        print(json.dumps(result))
        if args.out:
            write_json_atomic(args.out, result)
        return 0
    lab_args = lab_args or ["run"]
    variant = VARIANTS[args.variant]
    if variant.os != "linux":
        raise ValueError(f"{variant.name}: run it on a Windows container host (docs/containers.md)")
    reason = engine_reason() or (None if image_id(variant.tag) else Reason(
        "image_missing", f"{variant.tag} is not built: nox -s images -- {variant.name}"))
    if reason is not None:
        print(f"error: {reason.code}: {reason.message}", file=sys.stderr)
        return 2
    return run_lab(variant, lab_args, args.out)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
