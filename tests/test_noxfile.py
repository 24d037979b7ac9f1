"""The nox sessions: what `nox -s tests -- ARGS` hands to pytest; one shared environment with torch."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
TORCH_SESSIONS = ("tests", "lint", "lab", "smoke", "cpu_lab", "gpu_lab", "fleet", "env")


class Session:
    """The parts of nox.Session the sessions use, recording what they run and install (`no_venv`: `nox --no-venv`,
    nothing installed; else nox made `env_dir`, .nox/<name>)."""

    def __init__(self, posargs: list[str], no_venv: bool = True, env_dir: Path | None = None) -> None:
        self.posargs = posargs
        self.ran: list[tuple[str, ...]] = []
        self.envs: list[dict[str, str] | None] = []
        self.installed: list[tuple[str, ...]] = []
        self._runner = SimpleNamespace(global_config=SimpleNamespace(force_venv_backend="none" if no_venv else None))
        self.env_dir = env_dir
        self.virtualenv = SimpleNamespace(location=str(env_dir))

    def log(self, *args) -> None:
        pass

    def run(self, *args: str, **kwargs) -> None:
        self.ran.append(args)
        self.envs.append(kwargs.get("env"))

    def install(self, *args: str) -> None:
        self.installed.append(args)


@pytest.fixture(scope="module")
def noxfile():
    pytest.importorskip("nox")
    spec = importlib.util.spec_from_file_location("lab_noxfile", ROOT / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pytest_args(noxfile, posargs: list[str]) -> list[str]:
    session = Session(posargs)
    noxfile.tests.func(session) if hasattr(noxfile.tests, "func") else noxfile.tests(session)
    (cmd,) = session.ran
    return list(cmd[cmd.index("pytest") + 1:])


def test_tests_session_adds_posargs_to_quiet_and_skip_reasons(noxfile) -> None:
    assert _pytest_args(noxfile, []) == ["-q", "-rs"]
    assert _pytest_args(noxfile, ["-m", "not slow"]) == ["-q", "-rs", "-m", "not slow"]


def _call(noxfile, name: str, session: Session) -> None:
    func = getattr(noxfile, name)
    func.func(session) if hasattr(func, "func") else func(session)


def test_the_sessions_with_torch_share_one_environment(noxfile, tmp_path: Path) -> None:
    """Every session that needs torch makes no virtualenv of its own, requires labenv and runs labenv's interpreter;
    only labenv installs torch; the report and compare keep their own environments, without torch."""
    envdir = tmp_path / ".nox"
    noxfile._made.clear()
    for name in TORCH_SESSIONS:
        func = getattr(noxfile, name)
        assert (func.venv_backend, list(func.requires)) == ("none", ["labenv"]), name
        session = Session(["x"], no_venv=False, env_dir=envdir / name)
        _call(noxfile, name, session)
        assert session.installed == [], name
        assert {cmd[0] for cmd in session.ran} == {str(envdir / "labenv" / "bin" / "python")}, (name, session.ran)
        # and with labenv's scripts first on PATH, as if activated: hadolint, tlparse, python3 are the env's own
        for env in session.envs:
            assert env is not None and env["PATH"].split(os.pathsep)[0] == str(envdir / "labenv" / "bin"), name
            assert env["VIRTUAL_ENV"] == str(envdir / "labenv"), name
    for name in ("report", "compare"):
        func = getattr(noxfile, name)
        assert func.venv_backend is None and not func.requires, name
        session = Session(["x"], no_venv=False, env_dir=envdir / name)
        _call(noxfile, name, session)
        assert session.installed and not any(noxfile.TORCH in args for args in session.installed), name
        assert session.ran[0][0] == "python"  # its own virtualenv's


def test_labenv_installs_once_and_again_only_when_torch_or_pyproject_change(noxfile, tmp_path: Path,
                                                                           monkeypatch) -> None:
    env_dir = tmp_path / ".nox" / "labenv"
    env_dir.mkdir(parents=True)
    noxfile._made.clear()

    def made() -> list[tuple[str, ...]]:
        session = Session([], no_venv=False, env_dir=env_dir)
        _call(noxfile, "labenv", session)
        return session.installed

    assert made() == [(noxfile.TORCH,), ("-e", ".[dev]")]  # torch first, pinned
    assert noxfile._made["labenv"] == str(env_dir / "bin" / "python")  # what the sessions after it run
    assert made() == []  # reused: nothing to install
    monkeypatch.setattr(noxfile, "TORCH", "torch==2.11.0")  # LAB_TORCH changed
    assert made() == [("torch==2.11.0",), ("-e", ".[dev]")]
    assert made() == []
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text() + "\n# a new dependency\n")
    monkeypatch.setattr(noxfile, "ROOT", project)  # pyproject.toml changed
    assert made() == [("torch==2.11.0",), ("-e", ".[dev]")]


def test_no_venv_installs_nothing_and_runs_noxs_interpreter(noxfile, tmp_path: Path) -> None:
    for name in ("labenv", *TORCH_SESSIONS):
        session = Session(["x"], no_venv=True, env_dir=tmp_path / name)
        _call(noxfile, name, session)
        assert session.installed == [], name
        assert all(cmd[0] == sys.executable for cmd in session.ran), (name, session.ran)
