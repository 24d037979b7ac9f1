"""lab/__main__.py: bad input is one line (exit 2), a missing dependency names itself, a bug shows its traceback.

The missing-dependency cases run `python -m lab ...` in a fresh interpreter whose import system refuses one package (a meta-path
finder put first by a `-c` wrapper), as an interpreter without it would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
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

REFERENCE = "manifests/reference/cpu-2026-12-02-full"


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
    assert missing_dependency(ImportError("cannot import name 'x' from 'report.pages.front'", name="report.pages.front")) is None
    assert missing_dependency(ImportError("raised by hand")) is None
    import lab.__main__ as entry
    import lab.commands.env as env_command

    def broken(_args) -> int:
        raise ModuleNotFoundError("No module named 'lab.nothing'", name="lab.nothing")

    monkeypatch.setattr(env_command, "main", broken)
    assert entry.main(["env"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and BUG_REPORT in err


def _leave(body: str, grace_s: float = 2.0) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run `body` then `lab.shutdown.leave(3, grace_s)` in a fresh interpreter; its result and how long it took."""
    code = f"import subprocess, threading, time, atexit\nfrom lab.shutdown import leave\n{body}\nleave(3, grace_s={grace_s})"
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    return proc, time.monotonic() - start


def test_a_thread_that_never_ends_is_named_and_the_process_leaves_at_the_grace_with_the_commands_code():
    proc, took = _leave("threading.Thread(target=time.sleep, args=(3600,), name='stuck-worker').start()")
    assert proc.returncode == 3 and "leaving now" in proc.stderr and "thread 'stuck-worker' (left running)" in proc.stderr
    assert took < 60  # the grace is 2 s; an interpreter that waited for the thread would hit the 120 s timeout
    assert len([ln for ln in proc.stderr.splitlines() if ln.startswith("note:")]) == 1


def test_a_child_left_running_is_ended_and_named_in_one_line():
    proc, _ = _leave("child = subprocess.Popen(['sleep', '300'])\nprint(child.pid, flush=True)", grace_s=30.0)
    pid = int(proc.stdout.split()[0])
    assert proc.returncode == 3 and f"child process {pid} (sleep 300), ended" in proc.stderr and "leaving now" not in proc.stderr
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]


def test_exit_handlers_and_finished_threads_run_and_a_clean_exit_says_nothing():
    """atexit handlers and threading's exit hooks (concurrent.futures' pools) still run; nothing held, no note."""
    body = ("from concurrent.futures import ThreadPoolExecutor\npool = ThreadPoolExecutor(4)\n"
            "pool.submit(time.sleep, 0.2)\natexit.register(lambda: print('handler ran', flush=True))\n"
            "threading.Thread(target=time.sleep, args=(0.3,)).start()\nprint('last line', flush=True)")
    proc, _ = _leave(body, grace_s=30.0)
    assert proc.returncode == 3 and proc.stdout.splitlines() == ["last line", "handler ran"]
    assert proc.stderr == ""


def test_without_exit_handlers_the_process_ends_at_once_with_its_code_and_no_note():
    body = "atexit.register(lambda: print('handler ran', flush=True))\nprint('last line', flush=True)"
    code = f"import atexit\nfrom lab.shutdown import leave\n{body}\nleave(4, exit_handlers=False)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 4 and proc.stdout.splitlines() == ["last line"] and proc.stderr == ""


def test_an_exit_handler_that_never_returns_cannot_hold_the_process():
    proc, took = _leave("atexit.register(time.sleep, 3600)")
    assert proc.returncode == 3 and "an exit handler of a library did not return" in proc.stderr and took < 60


def test_children_are_read_from_proc_with_commands_that_hold_spaces_and_parentheses(tmp_path: Path) -> None:
    from lab.shutdown import children

    me = str(os.getpid())
    for pid, ppid, state, cmd in (("11", me, "S", b"python3\0-m\0lab"), ("12", me, "Z", b""), ("13", "1", "S", b"x"),
                                  ("14", me, "R", b"")):
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "stat").write_text(f"{pid} (odd (name) x) {state} {ppid} 0 0")
        (tmp_path / pid / "cmdline").write_bytes(cmd)
    (tmp_path / "self").mkdir()
    found = children(proc=tmp_path)
    assert [(c.pid, c.command) for c in found] == [(11, "python3 -m lab"), (14, "odd (name) x")]


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
