"""lab/__main__.py: a dependency the interpreter lacks is one line naming it and how to get it, exit 2, never a lab bug.

Each case runs `python -m lab ...` in a fresh interpreter whose import system refuses one package (a meta-path
finder put first by a `-c` wrapper), as an interpreter without it would.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lab.__main__ import BUG_REPORT, missing_dependency

ROOT = Path(__file__).resolve().parents[1]

# A `-c` program: refuse the packages in argv[1] (comma-separated), then run `python -m lab` with the rest.
BLOCKER = """
import runpy, sys
refused = set(sys.argv[1].split(","))
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in refused:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Refuse())
sys.argv = ["lab", *sys.argv[2:]]
runpy.run_module("lab", run_name="__main__", alter_sys=True)
"""

REFERENCE = "manifests/reference/cpu-2026-11-29-full"


def lab_without(package: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKER, package, *args], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=300)


def assert_names_missing(proc: subprocess.CompletedProcess, package: str) -> str:
    err = proc.stderr.strip()
    assert proc.returncode == 2, (proc.returncode, err[-2000:])
    assert "\n" not in err and "Traceback" not in err and "bug in the lab" not in err, err
    assert err.startswith("error: this interpreter (") and f" {package}," in err, err
    assert sys.executable in err
    return err


@pytest.mark.parametrize("args", [
    ("list", "--check", "smoke"),
    ("list", "--options"),
    ("run", "--profile", "smoke", "--only", "toolchain", "--out", "{tmp}/run"),
    ("report", REFERENCE, "--out", "{tmp}/site"),
    ("env",),
    ("compare", REFERENCE, REFERENCE),
], ids=lambda a: a[0] + ("-" + a[1] if a[1:2] and a[1].startswith("--") else ""))
def test_without_pydantic_every_command_names_it_and_the_routes(tmp_path: Path, args: tuple[str, ...]) -> None:
    proc = lab_without("pydantic", *(a.format(tmp=tmp_path) for a in args))
    err = assert_names_missing(proc, "pydantic")
    assert "pip install -e ." in err and ".nox/<session>/bin/python" in err and "without network" in err
    assert "wheelhouse" in err
    assert not (tmp_path / "run" / "results.json").exists()


@pytest.mark.parametrize("args", [
    ("list", "--check", "smoke"),
    ("list", "--options"),
    ("decode", "--method", "reference", "--prompt", "464,3290", "--steps", "2"),
    ("run", "--profile", "smoke", "--only", "toolchain", "--out", "{tmp}/run"),
], ids=lambda a: a[0] + ("-" + a[1] if a[1:2] and a[1].startswith("--") else ""))
def test_without_torch_the_line_says_the_torch_to_measure_comes_from_the_host(tmp_path: Path,
                                                                               args: tuple[str, ...]) -> None:
    proc = lab_without("torch", *(a.format(tmp=tmp_path) for a in args))
    err = assert_names_missing(proc, "torch")
    assert "the library the lab measures" in err and "pip install -e ." in err
    assert "wheelhouse leaves torch to the host" in err


def test_without_jinja2_the_report_names_it(tmp_path: Path) -> None:
    proc = lab_without("jinja2", "report", REFERENCE, "--out", str(tmp_path / "site"))
    assert_names_missing(proc, "jinja2")
    assert not (tmp_path / "site" / "index.html").exists()


def test_a_dependency_without_what_the_lab_imports_is_named_with_its_version_hint() -> None:
    exc = ImportError("cannot import name 'TypeAdapter' from 'pydantic' (/usr/lib/python3/pydantic/__init__.py)",
                      name="pydantic")
    line = missing_dependency(exc)
    assert line is not None and "pydantic is not a version the lab works with" in line
    assert "cannot import name 'TypeAdapter' from 'pydantic'" in line and "/usr/lib" not in line
    assert "pyproject.toml" in line


def test_import_names_are_turned_into_the_distributions_pip_installs() -> None:
    line = missing_dependency(ModuleNotFoundError("No module named 'yaml'", name="yaml"))
    assert line is not None and "lacks pyyaml," in line


def test_a_missing_module_of_the_lab_itself_stays_a_bug(capsys, monkeypatch) -> None:
    assert missing_dependency(ModuleNotFoundError("No module named 'lab.nothing'", name="lab.nothing")) is None
    assert missing_dependency(ImportError("cannot import name 'x' from 'report.front'", name="report.front")) is None
    assert missing_dependency(ImportError("raised by hand")) is None
    import lab.__main__ as entry
    import lab.commands.env as env_command

    def broken(_args) -> int:
        raise ModuleNotFoundError("No module named 'lab.nothing'", name="lab.nothing")

    monkeypatch.setattr(env_command, "main", broken)
    assert entry.main(["env"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and BUG_REPORT in err


def test_an_interpreter_that_will_not_shut_down_is_left_with_the_commands_exit_code(tmp_path):
    """A library thread that never ends keeps Python from exiting; the lab leaves anyway, with the command's code."""
    import subprocess
    import sys

    code = ("import threading, time; from lab.__main__ import exit_within; "
            "threading.Thread(target=time.sleep, args=(3600,)).start(); exit_within(3, grace_s=1)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 3 and "leaving now" in proc.stderr
