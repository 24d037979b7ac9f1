"""lab/__main__.py: bad input is one line (exit 2), a missing dependency names itself, a bug shows its traceback.

The missing-dependency cases run `python -m lab ...` in a fresh interpreter whose import system refuses one package (a meta-path
finder put first by a `-c` wrapper), as an interpreter without it would.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lab.__main__ import BUG_REPORT, main, missing_dependency
from lab.run.manifest import REPO_ROOT

from cli_helpers import cli, one_line_error

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_RUN = REPO_ROOT / "tests" / "fixtures" / "report_runs" / "cpu-smoke"

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


def test_cli_bad_input_is_one_line(capsys) -> None:
    assert main(["run", "--profile", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown profile 'nope'") and "\n" not in err
    assert main(["run", "--profile", "smoke", "--only", "warp_drive"]) == 2
    assert "warp_drive" in capsys.readouterr().err
    assert main(["decode", "--profile", "smoke", "--prompt", "1,2", "--prompt", "3", "--steps", "3"]) == 2
    assert "equal lengths" in capsys.readouterr().err


def test_user_errors_are_one_line(tmp_path: Path, capsys) -> None:
    """Problem 7: these printed tracebacks (or, for --only "", ran the whole profile)."""
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    bad_weights = tmp_path / "weights"
    bad_weights.mkdir()
    (bad_weights / "config.json").write_text("{not json")
    binary_weights = tmp_path / "weights-bin"
    binary_weights.mkdir()
    (binary_weights / "config.json").write_bytes(b"\xff\x00\x01")
    cases = [
        (["run", "--profile", "smoke", "--only", "toolchain", "--out", str(a_file)], "is a file"),
        (["run", "--profile", "smoke", "--only", ""], "--only ''"),
        (["run", "--profile", "smoke", "--only", " , ", "--out", str(tmp_path / "r")], "names no experiment"),
        (["run", "--profile", "smoke", "--only", "toolchain", "--weights", str(bad_weights), "--out",
          str(tmp_path / "r")], "config.json is not valid JSON"),
        (["env", "--weights", str(binary_weights)], "config.json is not UTF-8"),
        (["env", "--out", str(tmp_path)], "is a directory"),
        (["report", str(FIXTURE_RUN), "--out", str(a_file)], "is a file"),
    ]
    for args, expected in cases:
        err = one_line_error(capsys, *args)
        assert expected in err, (args, err)
    assert not (tmp_path / "r").exists()  # refused before anything was written


def test_a_bug_shows_its_traceback_and_where_to_report_it(capsys, monkeypatch) -> None:
    import lab.commands.list as list_command

    def bug(args) -> int:
        raise KeyError("an internal table is missing a row")

    monkeypatch.setattr(list_command, "main", bug)
    rc, err = cli(capsys, "list")
    assert rc == 1 and "Traceback" in err and "KeyError" in err
    assert "bug in the lab" in err and "Reporting a bug" in err
    readme = (REPO_ROOT / "README.md").read_text()
    assert "## Reporting a bug" in readme
