"""The nox sessions: what `nox -s tests -- ARGS` hands to pytest."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


class Session:
    """The parts of nox.Session the sessions use, recording what they run (`--no-venv`: nothing installed)."""

    venv_backend = "none"

    def __init__(self, posargs: list[str]) -> None:
        self.posargs = posargs
        self.ran: list[tuple[str, ...]] = []

    def log(self, *args) -> None:
        pass

    def run(self, *args: str, **kwargs) -> None:
        self.ran.append(args)


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
