"""The lab's menu: `nox -l` lists the sessions, `nox -s NAME` runs one.

    nox -s lab        the main job: the full lab on this host's default (gpu with CUDA, else cpu)
    nox -s tests      the test suite (CPU; GPU tests skip with a reason without CUDA)
    nox -s cpu_lab    the cpu profile            nox -s gpu_lab   the gpu profile
    nox -s smoke      the tiny smoke profile (a minute or two)
    nox -s report     the static HTML report of manifests/ and runs/ into site/ (-- RUN_DIR ... --out DIR)
    nox -s compare -- A B   what differs between two runs or manifests, with ratios and marks

Runs land in runs/<profile>-<timestamp>/ unless `-- --out DIR` is given.
"""

from __future__ import annotations

import os

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True

# The torch the lab measures. On CPU hosts here the 2.13.0 CPU wheel is on disk; on a CUDA host set
# LAB_TORCH to the build you want measured (e.g. "torch==2.11.0" from the CUDA index).
TORCH = os.environ.get("LAB_TORCH", "torch==2.13.0")
# The report and compare read JSON and draw charts: they need no torch, so a laptop holding results can run them.
REPORT_DEPS = ("jinja2>=3.1", "matplotlib>=3.8")


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


@nox.session(default=False)
def cpu_lab(session: nox.Session) -> None:
    """The cpu profile: GPT-2 124M on the CPU."""
    install(session)
    run_profile(session, "cpu")


@nox.session(default=False)
def gpu_lab(session: nox.Session) -> None:
    """The gpu profile; without CUDA every GPU experiment is recorded NOT_RUN: no_cuda."""
    install(session)
    run_profile(session, "gpu")


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
