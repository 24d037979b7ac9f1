"""lab/run/childproc.py: a child dies with its killed parent (and its whole run), its folder is cleaned next time,
a folder in use never is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.contract import profiles
from lab.run import runner
from lab.run.childproc import run_child
from lab.run.manifest import REPO_ROOT

from cli_helpers import one_graph

SMOKE = profiles.get("smoke")


HELPER = """
import os, time
from pathlib import Path

def sleep_and_tell(path):
    Path(path).write_text(str(os.getpid()))
    time.sleep(120)

def leaves_children(path):
    import subprocess
    kept = subprocess.Popen(["sleep", "300"])
    away = subprocess.Popen(["sleep", "300"], start_new_session=True)
    Path(path).write_text(f"{kept.pid} {away.pid}")
    return 1

def registers_a_slow_exit_handler(path):
    import atexit
    atexit.register(lambda: (time.sleep(3600), Path(path).write_text("handler ran")))
    return 3

def raises_after_a_slow_exit_handler(path):
    registers_a_slow_exit_handler(path)
    raise RuntimeError("CUDA error: device-side assert triggered")

def prints_bytes():
    import sys
    sys.stdout.buffer.write(b"before \\xff\\xfe after\\n")
    return 2
"""

PARENT = """
import sys
from lab.run.childproc import run_child
run_child("lab_test_helper:sleep_and_tell", {"path": sys.argv[1]}, timeout_s=300)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _wait(cond, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def test_a_function_that_leaves_children_behind_returns_at_once_and_takes_them_along(tmp_path: Path) -> None:
    """Issue 30, B8: diagnose waited out its whole --timeout while the target's `sleep 300` held the output pipe,
    then discarded the finished diagnosis; a child in a session of its own outlived it."""
    (tmp_path / "lab_test_helper.py").write_text(HELPER)
    pids = tmp_path / "pids"
    child = run_child("lab_test_helper:leaves_children", {"path": str(pids)}, timeout_s=60,
                      env={"PYTHONPATH": str(tmp_path)})
    assert child.ok and child.value == 1, child.describe()
    for pid in map(int, pids.read_text().split()):
        assert _wait(lambda: not _alive(pid), 20), f"{pid} outlived the child that started it"


def test_a_child_whose_result_is_written_skips_its_exit_handlers(tmp_path: Path) -> None:
    """Its work is on disk: a library's exit handler (Inductor's compile-worker pool, 7.7 s in a warm compile_cost
    child on an H200) would only tear down what it no longer uses; one that never returns cannot hold the run."""
    (tmp_path / "lab_test_helper.py").write_text(HELPER)
    marker = tmp_path / "handler"
    child = run_child("lab_test_helper:registers_a_slow_exit_handler", {"path": str(marker)}, timeout_s=120,
                      env={"PYTHONPATH": str(tmp_path)})
    assert child.ok and child.value == 3 and not child.timed_out, child.describe()
    assert not marker.exists()
    died = run_child("lab_test_helper:raises_after_a_slow_exit_handler", {"path": str(marker)}, timeout_s=120,
                     env={"PYTHONPATH": str(tmp_path)})
    assert died.exit_code == 1 and not died.timed_out and not marker.exists()
    assert died.describe() == "exit status 1: RuntimeError: CUDA error: device-side assert triggered"


SUBREAPER = """
import ctypes, subprocess, sys, time
from pathlib import Path
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER, as a lab child is (lab.run.childproc)
middle = subprocess.Popen([sys.executable, "-c", "import subprocess, time; "
                           "subprocess.Popen(['sleep', '300'], start_new_session=True); time.sleep(300)"])
Path(sys.argv[1]).write_text(str(middle.pid))
time.sleep(300)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; PR_SET_CHILD_SUBREAPER is Linux's")
def test_a_stopped_child_takes_every_descendant_along_whatever_its_session(tmp_path: Path) -> None:
    """Issue 30, B8: on a timeout the child's group was killed, and a process in a session of its own lived on."""
    from lab.run.childproc import descendants, kill_group

    pid_file = tmp_path / "middle.pid"
    child = subprocess.Popen([sys.executable, "-c", SUBREAPER, str(pid_file)], start_new_session=True)
    try:
        assert _wait(lambda: pid_file.exists() and len(descendants(child.pid)) == 2, 120), "the tree never grew"
        tree = descendants(child.pid)
        assert int(pid_file.read_text()) in tree
        kill_group(child)
    finally:
        child.kill()
        child.wait()
    for pid in tree:
        assert _wait(lambda: not _alive(pid), 20), f"{pid} outlived its killed ancestor"


def test_output_that_is_not_utf8_is_shown_not_fatal(tmp_path: Path) -> None:
    """Issue 30, B9: bytes \\xff\\xfe on the target's stdout failed the diagnosis ('utf-8' codec can't decode)."""
    (tmp_path / "lab_test_helper.py").write_text(HELPER)
    child = run_child("lab_test_helper:prints_bytes", {}, timeout_s=240, env={"PYTHONPATH": str(tmp_path)})
    assert child.ok and child.value == 2 and child.stdout_tail == "before \ufffd\ufffd after\n"


def _age(folder: Path) -> None:
    """Make an abandoned folder's lock older than the cleaner's grace period."""
    from lab.locks import GRACE_S, OWNER_NAME

    old = time.time() - GRACE_S - 60
    os.utime(folder / OWNER_NAME, (old, old))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_dies_with_its_killed_parent_and_its_folder_is_cleaned_next_time(tmp_path: Path) -> None:
    """Problem 9: after SIGKILL of a run its child kept working and its temporary folder stayed behind."""
    from lab.locks import clean_abandoned_tempdirs

    (tmp_path / "lab_test_helper.py").write_text(HELPER)
    temp = tmp_path / "tmp"
    temp.mkdir()
    pid_file = tmp_path / "child.pid"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO_ROOT}", "TMPDIR": str(temp)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(pid_file)], env=env, cwd=REPO_ROOT)
    try:
        assert _wait(pid_file.exists, 120), "the child never started"
        child = int(pid_file.read_text())
        assert _alive(child)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    assert _wait(lambda: not _alive(child), 20), "the child outlived its parent"
    left = [p for p in temp.iterdir() if p.name.startswith("lab-child-")]
    assert len(left) == 1  # the killed parent could not remove it
    assert clean_abandoned_tempdirs(str(temp)) == []  # too young: it might be taking its lock right now
    _age(left[0])
    assert clean_abandoned_tempdirs(str(temp)) == left and not left[0].exists()


def test_a_folder_in_use_is_never_cleaned(tmp_path: Path) -> None:
    from lab.locks import clean_abandoned_tempdirs, owned_tempdir

    with owned_tempdir("in-use", root=str(tmp_path)) as folder:
        _age(folder)
        assert clean_abandoned_tempdirs(str(tmp_path)) == [] and folder.exists()
    assert not folder.exists()


def test_a_run_cleans_what_killed_runs_left(tmp_path: Path, fake, monkeypatch) -> None:
    import tempfile

    from lab.locks import OWNER_NAME

    fake("graph_breaks", one_graph)
    left = tmp_path / "lab-compile-cost-abc"
    left.mkdir()
    (left / OWNER_NAME).write_text('{"pid": 1}')  # its holder died: no lock on it
    (left / "cache").mkdir()
    _age(left)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    runner.run(SMOKE, tmp_path / "run", only=["graph_breaks"])
    assert not left.exists()


def _descendants_of_run(lab_pid: int, temp: Path, command: bytes = b"") -> list[int]:
    """The live processes a lab run started, directly or not (they inherited its TMPDIR, the test's own), whose
    command line contains `command`."""
    marker = f"TMPDIR={temp}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != lab_pid:
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0") and \
                        command in (entry / "cmdline").read_bytes() and _alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; PR_SET_PDEATHSIG is Linux's")
def test_sigkill_of_a_compile_cost_run_takes_its_compiling_child_along(tmp_path: Path) -> None:
    """Problem 9 as reported: SIGKILL a run during compile_cost; its child must stop compiling, and the next run
    removes the temporary folders the killed run left."""
    from lab.host.toolchain import probe

    if probe().cxx_reason() is not None:
        pytest.skip("compile_cost needs a working C++ compiler here")
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(REPO_ROOT)}
    lab = subprocess.Popen([sys.executable, "-m", "lab", "run", "--profile", "smoke", "--only", "compile_cost",
                            "--out", str(tmp_path / "killed")], env=env, cwd=REPO_ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        child = b"lab.experiments.compile_cost:child_first_call"
        assert _wait(lambda: bool(_descendants_of_run(lab.pid, temp, child)), 300), \
            "compile_cost never started its child"
        time.sleep(3)  # compiling now
    finally:
        lab.send_signal(signal.SIGKILL)
        lab.wait()
    assert _wait(lambda: not _descendants_of_run(lab.pid, temp), 30), "the compile_cost child outlived its run"
    left = sorted(p.name.split("-")[1] for p in temp.iterdir() if p.name.startswith("lab-"))
    assert "compile" in left and "child" in left, left
    for folder in temp.iterdir():
        if folder.name.startswith("lab-"):
            _age(folder)
    rerun = subprocess.run([sys.executable, "-m", "lab", "run", "--profile", "smoke", "--only", "toolchain", "--out",
                            str(tmp_path / "next")], env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                           timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert not [p for p in temp.iterdir() if p.name.startswith("lab-")]
    assert "left by killed runs" in rerun.stderr


@pytest.mark.slow
def test_child_death_is_recorded() -> None:
    ok = run_child("json:loads", {"s": "[1, 2]"})
    assert ok.ok and ok.value == [1, 2]
    died = run_child("os:abort", {})
    assert not died.ok and died.signal == "SIGABRT" and "SIGABRT" in died.describe()
    raised = run_child("lab.contract.profiles:get", {"name": "nope"})
    assert raised.exit_code == 1 and "unknown profile" in raised.describe()
    slow = run_child("subprocess:run", {"args": ["sleep", "30"]}, timeout_s=2)
    assert slow.timed_out and slow.describe().startswith("timed out")
