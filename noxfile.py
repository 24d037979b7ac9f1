"""The lab's menu: `nox -l` lists the sessions, `nox -s NAME [-- ARGS]` runs one.

Every session only installs what it needs and passes its arguments to `python -m lab COMMAND`
(the commands are in lab/commands/; `python -m lab COMMAND --help` says what each accepts).
Sessions that only drive Docker or Slurm run with the host's python3 (no virtualenv, no torch).

`nox --no-venv -s NAME`: no virtualenv and nothing installed; the session runs `python -m lab ...`
with the interpreter nox runs under and the packages it already has (a GPU host with torch and no
network: `python3 -m nox -s gpu_lab --no-venv -- --out DIR`).
"""

from __future__ import annotations

import os
import sys

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True

# The torch the lab measures: the 2.13.0 CPU wheel on CPU hosts here; on a CUDA host set LAB_TORCH
# to the build you want measured (e.g. "torch==2.11.0").
TORCH = os.environ.get("LAB_TORCH", "torch==2.13.0")
# The report and compare read JSON and draw charts: no torch, so a laptop holding results can run them.
REPORT_DEPS = ("jinja2>=3.1", "matplotlib>=3.8", "pydantic>=2.7")
# pytest's arguments in `nox -s tests`, before the session's own: quiet, and why each skipped test skipped.
TEST_DEFAULTS = ("-q", "-rs")
# The host's interpreter for sessions that only orchestrate (standard library only).
HOST_PYTHON = "python3"


def no_venv(session: nox.Session) -> bool:
    """`nox --no-venv`: the session runs in the current environment, where nothing may be installed."""
    return session.venv_backend == "none"


def python(session: nox.Session) -> str:
    """The session's interpreter: the virtualenv's, or (--no-venv) the one nox itself runs under."""
    return sys.executable if no_venv(session) else "python"


def _uses_current_environment(session: nox.Session) -> bool:
    if no_venv(session):
        session.log(f"--no-venv: no virtualenv, nothing installed; running with {sys.executable} and the packages "
                    "it has (no network needed)")
    return no_venv(session)


def install(session: nox.Session, *extras: str) -> None:
    """torch first (pinned, so nothing pulls another build), then the lab in editable mode."""
    if _uses_current_environment(session):
        return
    session.install(TORCH)
    session.install("-e", f".[{','.join(extras)}]" if extras else ".")


def install_report(session: nox.Session) -> None:
    """The lab without its dependencies (no torch) plus what the report needs."""
    if _uses_current_environment(session):
        return
    session.install(*REPORT_DEPS)
    session.install("--no-deps", "-e", ".")


def lab_command(session: nox.Session, *args: str) -> None:
    """`python -m lab ARGS` in the session's virtualenv (--no-venv: with nox's own interpreter)."""
    session.run(python(session), "-m", "lab", *args, external=no_venv(session))


def host_lab_command(session: nox.Session, *args: str) -> None:
    """`python3 -m lab ARGS` with the host's interpreter, from the repo root (sessions without a virtualenv)."""
    session.run(HOST_PYTHON, "-m", "lab", *args, external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, mypy and import-linter (their settings, and why, are in pyproject.toml)."""
    if not _uses_current_environment(session):
        session.install(TORCH)
        session.install("-e", ".[dev]")
    external = no_venv(session)
    session.run(python(session), "-m", "ruff", "check", "lab", "report", "tests", "noxfile.py", external=external)
    session.run(python(session), "-m", "mypy", external=external)
    session.run(python(session), "-c", "import sys; from importlinter.cli import lint_imports_command as cli; "
                "sys.exit(cli())", external=external)


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite: quiet, skipped tests with their reason; pytest arguments after -- are added (-- -m "not slow")."""
    install(session, "dev")
    session.run(python(session), "-m", "pytest", *TEST_DEFAULTS, *session.posargs, external=no_venv(session))


@nox.session
def lab(session: nox.Session) -> None:
    """The main job: the whole lab on this host's default profile (gpu with CUDA, else cpu)."""
    install(session)
    lab_command(session, "run", *session.posargs)


@nox.session
def smoke(session: nox.Session) -> None:
    """The smoke profile: a tiny model, every code path, a couple of minutes on 2 cores."""
    install(session)
    lab_command(session, "run", "--profile", "smoke", *session.posargs)


@nox.session(default=False)
def cpu_lab(session: nox.Session) -> None:
    """The cpu profile in graph-lab:cpu, else on the host saying why (-- --variant V, --host, --require-container)."""
    install(session)
    lab_command(session, "image-run", "--profile", "cpu", *session.posargs)


@nox.session(default=False)
def gpu_lab(session: nox.Session) -> None:
    """The gpu profile in graph-lab:cuda with --gpus all, else on the host saying why (same options as cpu_lab)."""
    install(session)
    lab_command(session, "image-run", "--profile", "gpu", *session.posargs)


@nox.session(venv_backend="none", default=False)
def images(session: nox.Session) -> None:
    """Build image variants: -- cpu cpu-nocc cuda cuda-notriton windows-msvc (outcomes in build/images.json)."""
    host_lab_command(session, "images", *session.posargs)


@nox.session(venv_backend="none", default=False)
def base_image(session: nox.Session) -> None:
    """Make graph-lab-base:bookworm with debootstrap from the host's apt mirror (root; reused if present)."""
    host_lab_command(session, "base-image", *session.posargs)


@nox.session(default=False)
def fleet(session: nox.Session) -> None:
    """Targets as a Slurm job array, one report comparing the hosts: -- --results DIR --profile P --variant V (docs/fleet.md)."""
    install(session)
    lab_command(session, "fleet", *session.posargs)


@nox.session(default=False)
def env(session: nox.Session) -> None:
    """Print this host's environment manifest (-- --out FILE to write it)."""
    install(session)
    lab_command(session, "env", *session.posargs)


@nox.session
def report(session: nox.Session) -> None:
    """Render the static report (site/index.html) from manifests/ and runs/, or from -- RUN_DIR ... [--out DIR]."""
    install_report(session)
    lab_command(session, "report", *session.posargs)


@nox.session(default=False)
def compare(session: nox.Session) -> None:
    """Compare two runs or manifests: -- A B (run directories, results.json or manifest.json)."""
    install_report(session)
    lab_command(session, "compare", *session.posargs)


@nox.session(venv_backend="none", default=False)
def wheelhouse(session: nox.Session) -> None:
    """On a connected host: the lab's dependencies but torch as hashed wheels for an offline GPU host: -- DIR --python 3.12 --platform manylinux_2_28_x86_64."""
    lab_command(session, "wheelhouse", *session.posargs)
