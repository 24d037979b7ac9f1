"""The lab's menu: `nox -l` lists the sessions, `nox -s NAME [-- ARGS]` runs one.

Every session passes its arguments to `python -m lab COMMAND` (the commands are in lab/commands/;
`python -m lab COMMAND --help` says what each accepts).

One environment with torch for all: the sessions that need torch (tests, lint, lab, smoke, cpu_lab,
gpu_lab, fleet, env) agree on their dependencies (the pinned torch and the lab with its dev tools), so
they make no virtualenv of their own: each requires `labenv`, which makes `.nox/labenv` once (torch
and `pip install -e .[dev]`), reinstalls only when `LAB_TORCH` or pyproject.toml changed, and whose
interpreter they run. The installed nox has no `venv_location`: this is `requires=` plus
`venv_backend="none"` and an explicit interpreter. The report and compare, which must run without
torch, keep their small virtualenvs; sessions that only drive Docker or Slurm run with the host's
python3 (no virtualenv, no torch).

`nox --no-venv -s NAME`: no virtualenv and nothing installed; the session runs `python -m lab ...`
with the interpreter nox runs under and the packages it already has (a GPU host with torch and no
network: `python3 -m nox -s gpu_lab --no-venv -- --out DIR`).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any, Callable

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
# The shared environment: its session's name (nox makes it in .nox/labenv), what it installs, and the
# file in it recording what was installed (so a reused one is not reinstalled).
SHARED = "labenv"
SHARED_EXTRAS = ("dev",)
STAMP = "lab-installed.txt"
ROOT = Path(__file__).resolve().parent
_made: dict[str, str] = {}  # the shared environment's interpreter, once `labenv` has run in this nox process


def no_venv(session: nox.Session) -> bool:
    """`nox --no-venv` (or `--force-venv-backend none`): no virtualenv anywhere, nothing installed. (Read from
    nox's configuration: a session that declares venv_backend="none" would say "none" here too.)"""
    return session._runner.global_config.force_venv_backend == "none"


def _uses_current_environment(session: nox.Session) -> bool:
    if no_venv(session):
        session.log(f"--no-venv: no virtualenv, nothing installed; running with {sys.executable} and the packages "
                    "it has (no network needed)")
    return no_venv(session)


def _interpreter(env_dir: Path) -> Path:
    return env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def shared_python(session: nox.Session) -> str:
    """The interpreter the torch sessions run: labenv's, or (--no-venv) the one nox itself runs under."""
    if no_venv(session):
        return sys.executable
    return _made.get(SHARED) or str(_interpreter(Path(session.env_dir).parent / SHARED))


def shared_run(session: nox.Session, *args: str) -> None:
    """Run ARGS[0] (the shared interpreter) with the shared environment's scripts first on PATH, as in an activated
    virtualenv: what the lab and its tests look up by name (hadolint, tlparse, python3) is the environment's.
    (--no-venv: the current environment as it is.)"""
    if no_venv(session):
        session.run(*args, external=True)
        return
    scripts = Path(shared_python(session)).parent
    env = {"PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}", "VIRTUAL_ENV": str(scripts.parent)}
    session.run(*args, external=True, env=env)


def wanted() -> str:
    """What the shared environment must hold: the torch pin, the extras, and pyproject.toml's digest."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    return f"{TORCH}\n.[{','.join(SHARED_EXTRAS)}]\npyproject.toml {digest}\n"


def install_report(session: nox.Session) -> None:
    """The lab without its dependencies (no torch) plus what the report needs."""
    if _uses_current_environment(session):
        return
    session.install(*REPORT_DEPS)
    session.install("--no-deps", "-e", ".")


def lab_command(session: nox.Session, *args: str) -> None:
    """`python -m lab ARGS` with the shared environment's interpreter (--no-venv: with nox's own)."""
    shared_run(session, shared_python(session), "-m", "lab", *args)


def own_lab_command(session: nox.Session, *args: str) -> None:
    """`python -m lab ARGS` in the session's own virtualenv (report, compare; --no-venv: with nox's interpreter)."""
    session.run(sys.executable if no_venv(session) else "python", "-m", "lab", *args, external=no_venv(session))


def host_lab_command(session: nox.Session, *args: str) -> None:
    """`python3 -m lab ARGS` with the host's interpreter, from the repo root (sessions without a virtualenv)."""
    session.run(HOST_PYTHON, "-m", "lab", *args, external=True)


def with_torch(**kwargs: Any) -> Callable[[Callable[..., Any]], Any]:
    """A session that runs in the shared environment: no virtualenv of its own, `labenv` first."""
    return nox.session(venv_backend="none", requires=[SHARED], **kwargs)


@nox.session(name=SHARED, default=False)
def labenv(session: nox.Session) -> None:
    """The environment with torch the other sessions share: made once, reinstalled only when LAB_TORCH or pyproject.toml changed."""
    if _uses_current_environment(session):
        return
    _made[SHARED] = str(_interpreter(Path(session.virtualenv.location)))
    stamp = Path(session.virtualenv.location) / STAMP
    if stamp.is_file() and stamp.read_text() == wanted():
        session.log(f"{SHARED}: {TORCH} and the lab already installed (pyproject.toml unchanged): nothing to do")
        return
    stamp.unlink(missing_ok=True)  # (a failed install below leaves no stamp: the next session tries again)
    session.install(TORCH)  # torch first (pinned, so nothing pulls another build), then the lab, editable
    session.install("-e", f".[{','.join(SHARED_EXTRAS)}]")
    stamp.write_text(wanted())


@with_torch()
def lint(session: nox.Session) -> None:
    """ruff, mypy and import-linter (their settings, and why, are in pyproject.toml)."""
    python = shared_python(session)
    shared_run(session, python, "-m", "ruff", "check", "lab", "report", "tests", "noxfile.py")
    shared_run(session, python, "-m", "mypy")
    shared_run(session, python, "-c", "import sys; from importlinter.cli import lint_imports_command as cli; "
               "sys.exit(cli())")


@with_torch()
def tests(session: nox.Session) -> None:
    """The test suite: quiet, skipped tests with their reason; pytest arguments after -- are added (-- -m "not slow")."""
    shared_run(session, shared_python(session), "-m", "pytest", *TEST_DEFAULTS, *session.posargs)


@with_torch()
def lab(session: nox.Session) -> None:
    """The main job: the whole lab on this host's default profile (gpu with CUDA, else cpu)."""
    lab_command(session, "run", *session.posargs)


@with_torch()
def smoke(session: nox.Session) -> None:
    """The smoke profile: a tiny model, every code path, a couple of minutes on 2 cores."""
    lab_command(session, "run", "--profile", "smoke", *session.posargs)


@with_torch(default=False)
def cpu_lab(session: nox.Session) -> None:
    """The cpu profile in graph-lab:cpu, else on the host saying why (-- --variant V, --host, --require-container)."""
    lab_command(session, "image-run", "--profile", "cpu", *session.posargs)


@with_torch(default=False)
def gpu_lab(session: nox.Session) -> None:
    """The gpu profile in graph-lab:cuda with --gpus all, else on the host saying why (same options as cpu_lab)."""
    lab_command(session, "image-run", "--profile", "gpu", *session.posargs)


@nox.session(venv_backend="none", default=False)
def images(session: nox.Session) -> None:
    """Build image variants: -- cpu cpu-nocc cuda cuda-notriton windows-msvc (outcomes in build/images.json)."""
    host_lab_command(session, "images", *session.posargs)


@nox.session(venv_backend="none", default=False)
def base_image(session: nox.Session) -> None:
    """Make graph-lab-base:bookworm with debootstrap from the host's apt mirror (root; reused if present)."""
    host_lab_command(session, "base-image", *session.posargs)


@with_torch(default=False)
def fleet(session: nox.Session) -> None:
    """Targets as a Slurm job array, one report comparing the hosts: -- --results DIR --profile P --variant V (docs/fleet.md)."""
    lab_command(session, "fleet", *session.posargs)


@with_torch(default=False)
def env(session: nox.Session) -> None:
    """Print this host's environment manifest (-- --out FILE to write it)."""
    lab_command(session, "env", *session.posargs)


@nox.session
def report(session: nox.Session) -> None:
    """Render the static report (site/index.html) from manifests/ and runs/, or from -- RUN_DIR ... [--out DIR]."""
    install_report(session)
    own_lab_command(session, "report", *session.posargs)


@nox.session(default=False)
def compare(session: nox.Session) -> None:
    """Compare two runs or manifests: -- A B (run directories, results.json or manifest.json)."""
    install_report(session)
    own_lab_command(session, "compare", *session.posargs)


@nox.session(venv_backend="none", default=False)
def wheelhouse(session: nox.Session) -> None:
    """On a connected host: the lab's dependencies but torch as hashed wheels for an offline GPU host: -- DIR --python 3.12 --platform manylinux_2_28_x86_64."""
    session.run(sys.executable, "-m", "lab", "wheelhouse", *session.posargs, external=True)
