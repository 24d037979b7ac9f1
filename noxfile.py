"""The lab's menu: `nox -l` lists the sessions, `nox -s NAME` runs one.

    nox -s lab        the main job: the full lab on this host's default (gpu with CUDA, else cpu)
    nox -s tests      the test suite (CPU; GPU tests skip with a reason without CUDA)
    nox -s cpu_lab    the cpu profile            nox -s gpu_lab   the gpu profile
    nox -s smoke      the tiny smoke profile (a minute or two)
    nox -s report     the static HTML report of manifests/ and runs/ into site/ (-- RUN_DIR ... --out DIR)
    nox -s compare -- A B   what differs between two runs or manifests, with ratios and marks
    nox -s images -- cpu cpu-nocc cuda cuda-notriton windows-msvc    build container images (docs/containers.md)
    nox -s base_image the Debian base image made from the host's apt mirror (hosts without a registry)

cpu_lab and gpu_lab run inside the matching image (graph-lab:cpu / graph-lab:cuda) when a Docker
engine and the image are there, on the host otherwise (the manifest says why: LAB_HOST_FALLBACK).

Runs land in runs/<profile>-<timestamp>/ unless `-- --out DIR` is given.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime
from pathlib import Path

import nox

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lab import container  # noqa: E402  (standard library only: no venv needed to import it)

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True

# The torch the lab measures. On CPU hosts here the 2.13.0 CPU wheel is on disk; on a CUDA host set
# LAB_TORCH to the build you want measured (e.g. "torch==2.11.0" from the CUDA index).
TORCH = os.environ.get("LAB_TORCH", "torch==2.13.0")
# The report and compare read JSON and draw charts: they need no torch, so a laptop holding results can run them.
REPORT_DEPS = ("jinja2>=3.1", "matplotlib>=3.8", "pydantic>=2.7")


def install(session: nox.Session, *extras: str) -> None:
    """torch first (pinned, so nothing pulls another build), then the lab in editable mode."""
    session.install(TORCH)
    session.install("-e", f".[{','.join(extras)}]" if extras else ".")


def run_profile(session: nox.Session, profile: str | None) -> None:
    args = ["python", "-m", "lab", "run"]
    if profile:
        args += ["--profile", profile]
    session.run(*args, *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (pass pytest arguments after --)."""
    install(session, "dev")
    session.run("python", "-m", "pytest", *(session.posargs or ["-q"]))


@nox.session
def lab(session: nox.Session) -> None:
    """The main job: the whole lab on this host's default profile (gpu with CUDA, else cpu)."""
    install(session)
    run_profile(session, None)


@nox.session
def smoke(session: nox.Session) -> None:
    """The smoke profile: a tiny model, every code path, a couple of minutes on 2 cores."""
    install(session)
    run_profile(session, "smoke")


def lab_in_container(session: nox.Session, profile: str) -> None:
    """Run `profile` in its image when Docker and the image are there, else on the host, saying why.

    Extra arguments: `--host` forces the host, `--variant NAME` picks another image (e.g. cpu-nocc);
    the rest go to `python -m lab run` (`--out DIR` is mounted at /out so results land on the host).
    """
    args = list(session.posargs)
    variant_name = container.option_value(args, "--variant")
    args = container.without_option(args, "--variant")
    forced_host = "--host" in args
    args = [a for a in args if a != "--host"]
    if forced_host:
        variant, reason = None, container.Reason("host_requested", "--host was given: run on the host by request")
    else:
        variant, reason = container.container_plan(profile, gpu_needed=profile == "gpu", variant_name=variant_name)
    if variant is not None:
        out = Path(container.option_value(args, "--out") or
                   Path("runs") / f"{profile}-{datetime.now().strftime('%Y%m%d-%H%M%S')}")
        code = container.run_lab(variant, ["run", "--profile", profile, *args], out, log=session.log)
        if code != 0:
            session.error(f"the lab exited with {code} in {variant.tag}")
        session.log(f"results: {out / 'results.json'} (image {variant.tag})")
        return
    assert reason is not None
    session.warn(f"running on the host, not in a container: {reason.code}: {reason.message}")
    install(session)
    session.run("python", "-m", "lab", "run", "--profile", profile, *args,
                env={"LAB_HOST_FALLBACK": f"{reason.code}: {reason.message}"})


@nox.session(default=False)
def cpu_lab(session: nox.Session) -> None:
    """The cpu profile (GPT-2 124M on the CPU), in graph-lab:cpu when Docker is there, else on the host."""
    lab_in_container(session, "cpu")


@nox.session(default=False)
def gpu_lab(session: nox.Session) -> None:
    """The gpu profile, in graph-lab:cuda with --gpus all when Docker is there, else on the host.

    Without CUDA every GPU experiment is recorded NOT_RUN: no_cuda."""
    lab_in_container(session, "gpu")


@nox.session(venv_backend="none", default=False)
def images(session: nox.Session) -> None:
    """Build image variants: `nox -s images -- cpu cpu-nocc cuda cuda-notriton windows-msvc` (default cpu).

    Options after the names: --base-image REF, --wheelhouse DIR, --pip-cert FILE, --no-host-pip,
    --build-arg K=V. Outcomes (OK / NOT_RUN with why / FAILED) go to build/images.json."""
    code = container.main(["images", *session.posargs])
    if code != 0:
        session.error("an image failed to build (see build/images.json)")


@nox.session(venv_backend="none", default=False)
def base_image(session: nox.Session) -> None:
    """Make graph-lab-base:bookworm with debootstrap from the host's apt mirror (root; reused if present).

    Options: --mirror URL, --suite NAME, --tag NAME:TAG, --force."""
    code = container.main(["base-image", *session.posargs])
    if code != 0:
        session.error("no base image (see the line above)")


@nox.session(default=False)
def env(session: nox.Session) -> None:
    """Print this host's environment manifest (-- --out FILE to write it)."""
    install(session)
    session.run("python", "-m", "lab", "env", *session.posargs)


def install_report(session: nox.Session) -> None:
    """The lab without its dependencies (no torch) plus what the report needs."""
    session.install(*REPORT_DEPS)
    session.install("--no-deps", "-e", ".")


@nox.session
def report(session: nox.Session) -> None:
    """Render the static report (site/index.html) from manifests/ and runs/, or from -- RUN_DIR ... [--out DIR]."""
    install_report(session)
    session.run("python", "-m", "lab", "report", *session.posargs)


@nox.session(default=False)
def compare(session: nox.Session) -> None:
    """Compare two runs or manifests: -- A B (run directories, results.json or manifest.json)."""
    if len(session.posargs) < 2:
        session.error("usage: nox -s compare -- A B (run directories, results.json or manifest.json files)")
    install_report(session)
    session.run("python", "-m", "lab", "compare", *session.posargs)
