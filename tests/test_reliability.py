"""Nothing lost, no traceback: every experiment gets a record, user errors are one line, hostile files are
skipped by name, result files are readable, children die with their run, the test suite stays quiet."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.contract import metrics as M
from lab.contract import profiles
from lab.run import runner
from lab.run.manifest import REPO_ROOT
from lab.contract.results import load

from cli_helpers import cli, one_compile, one_graph, one_line_error

SMOKE = profiles.get("smoke")
FIXTURE_RUN = REPO_ROOT / "tests" / "fixtures" / "report_runs" / "cpu-smoke"


THREE = ["graph_breaks", "recompiles", "decode_recompiles"]


# ---------------------------------------------------------------------------- a record for every experiment

def test_sys_exit_inside_an_experiment_is_failed_and_the_run_goes_on(tmp_path: Path, fake) -> None:
    """Problem 5: an experiment calling sys.exit ended the whole run, later experiments lost, state 'running'."""

    def exits(ctx) -> None:
        ctx.metric(M.COMPILES, 2)
        sys.exit(3)

    fake("graph_breaks", one_graph)
    fake("recompiles", exits)
    fake("decode_recompiles", one_compile)
    res = runner.run(SMOKE, tmp_path, only=THREE)
    assert [r.status for r in res.experiments] == ["OK", "FAILED", "OK"]
    failed = res.record("recompiles")
    assert failed.reason.code == "exception" and "SystemExit" in failed.reason.message and "3" in failed.reason.message
    assert failed.metric("compiles").value == 2  # what it measured before is kept
    assert load(tmp_path).run.state == "complete"


def test_an_unrecordable_value_is_failed_naming_the_metric_and_numpy_scalars_are_numbers(tmp_path: Path,
                                                                                       fake) -> None:
    import numpy as np
    import torch

    def tensor_metric(ctx) -> None:
        ctx.metric(M.GRAPHS, 1)
        ctx.metric(M.GRAPH_BREAKS, torch.tensor(2))

    def numpy_values(ctx) -> None:
        ctx.metric(M.COMPILES, np.int64(3), batch=np.int64(2))
        ctx.note("scalars", {"ratio": np.float32(0.5), "ok": np.bool_(True), "n": [np.int64(1), 2]})

    def set_note(ctx) -> None:
        ctx.metric(M.COMPILES, 1)
        ctx.note("seen", {1, 2})
        ctx.metric(M.COMPILES, 2)  # never reached: the note failed the experiment where it was recorded

    fake("graph_breaks", tensor_metric)
    fake("recompiles", numpy_values)
    fake("decode_recompiles", set_note)
    res = runner.run(SMOKE, tmp_path, only=THREE)
    saved = load(tmp_path)
    gb, rc, dr = (saved.record(i) for i in THREE)
    assert gb.status == "FAILED" and "'graph_breaks'" in gb.reason.message and "Tensor" in gb.reason.message
    assert [m.name for m in gb.metrics] == ["graphs"]
    assert rc.status == "OK" and rc.metric("compiles").value == 3 and rc.metric("compiles").params == {"batch": 2}
    assert rc.notes["scalars"] == {"ratio": 0.5, "ok": True, "n": [1, 2]}
    assert type(res.record("recompiles").metric("compiles").value) is int
    assert dr.status == "FAILED" and "note 'seen'" in dr.reason.message and "set" in dr.reason.message
    assert [m.value for m in dr.metrics] == [1] and "set_note" in dr.error["traceback"]
    assert saved.run.state == "complete"


def test_an_interrupted_run_records_every_experiment_it_was_asked_for(tmp_path: Path, fake) -> None:
    """Problem 6: an interrupted run recorded nothing for the experiments it never reached."""

    def interrupted(ctx) -> None:
        ctx.metric(M.COMPILES, 5)
        raise KeyboardInterrupt

    fake("graph_breaks", one_graph)
    fake("recompiles", interrupted)
    fake("decode_recompiles", one_compile)
    with pytest.raises(KeyboardInterrupt):
        runner.run(SMOKE, tmp_path, only=THREE)
    saved = load(tmp_path)
    assert saved.run.state == "interrupted" and saved.run.finished_at
    assert [(r.id, r.status) for r in saved.experiments] == [
        ("graph_breaks", "OK"), ("recompiles", "NOT_RUN"), ("decode_recompiles", "NOT_RUN")]
    during, before = saved.record("recompiles"), saved.record("decode_recompiles")
    assert during.reason.code == before.reason.code == "interrupted"
    assert "during this experiment" in during.reason.message and during.metric("compiles").value == 5
    assert "before this experiment started" in before.reason.message and "--resume" in before.reason.message


def test_sigterm_is_recorded_like_ctrl_c(tmp_path: Path, capsys, fake) -> None:
    def terminated(ctx) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # the handler raises before this ends

    fake("graph_breaks", terminated)
    fake("recompiles", one_compile)
    rc, err = cli(capsys, "run", "--profile", "smoke", "--only", "graph_breaks,recompiles", "--out", str(tmp_path))
    assert rc == 128 + signal.SIGTERM and "stopped by SIGTERM" in err and "Traceback" not in err
    saved = load(tmp_path)
    assert saved.run.state == "interrupted"
    assert [(r.status, r.reason.code) for r in saved.experiments] == [("NOT_RUN", "interrupted")] * 2
    assert "SIGTERM" in saved.record("graph_breaks").reason.message
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # put back


def test_an_error_of_the_runner_itself_still_leaves_a_record_for_every_experiment(tmp_path: Path, capsys, fake,
                                                                                   monkeypatch) -> None:
    fake("graph_breaks", one_graph)
    fake("recompiles", one_compile)

    def broken(record) -> None:
        raise RuntimeError("a bug in the runner's printing")

    monkeypatch.setattr(runner.out, "experiment_finished", broken)
    rc, err = cli(capsys, "run", "--profile", "smoke", "--only", "graph_breaks,recompiles", "--out", str(tmp_path))
    assert rc == 1 and "Traceback" in err and "bug in the lab" in err and "README.md" in err
    saved = load(tmp_path)
    assert saved.run.state == "interrupted"
    assert [r.status for r in saved.experiments] == ["OK", "NOT_RUN"]
    assert "RuntimeError" in saved.record("recompiles").reason.message


# ---------------------------------------------------------------------------- user errors: one line, exit 2

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


def test_a_run_directory_denied_in_an_image_names_the_mounts_fix(tmp_path: Path, capsys, monkeypatch) -> None:
    """In a container, /out owned by another uid: the one line says permission denied, for which uid, and the fix
    (chown or --user), as every other permission error of the lab does (the images' own check demands it)."""
    from lab import locks

    def refuse(self, **_):
        raise PermissionError(13, "Permission denied", str(self.path))

    monkeypatch.setattr(locks.OwnerLock, "acquire", refuse)
    monkeypatch.setenv("LAB_IMAGE", "graph-lab:cpu")
    err = one_line_error(capsys, "run", "--profile", "smoke", "--only", "toolchain", "--out", str(tmp_path / "out"))
    assert err.startswith(f"error: {tmp_path / 'out'}: permission denied for uid"), err
    assert "chown" in err and "--user" in err and "cannot write there" in err


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(),
                    reason="needs Linux's /sys (a directory nobody can write, root included)")
def test_a_directory_nobody_can_write_is_one_line(capsys) -> None:
    err = one_line_error(capsys, "run", "--profile", "smoke", "--only", "toolchain", "--out", "/sys/kernel")
    assert "/sys/kernel" in err and "cannot write there" in err


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_directory_is_one_line(tmp_path: Path, capsys) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        err = one_line_error(capsys, "run", "--profile", "smoke", "--only", "toolchain", "--out", str(ro))
        assert "cannot write there" in err
        err = one_line_error(capsys, "run", "--profile", "smoke", "--only", "toolchain", "--out", str(ro / "sub"))
        assert "cannot create the directory" in err
    finally:
        ro.chmod(0o755)


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


def test_diagnose_names_the_target_that_raised(tmp_path: Path, capsys, monkeypatch) -> None:
    """Problem 10: a callable that raised printed only `error: <message>`, no target."""
    (tmp_path / "my_workload.py").write_text(
        "import torch\n\n"
        "def step(x):\n"
        "    raise ValueError('shapes do not line up')\n\n"
        "def make():\n"
        "    return step, (torch.ones(3),)\n\n"
        "def make_fails():\n"
        "    raise RuntimeError('no data here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    err = one_line_error(capsys, "diagnose", "my_workload:make", "--no-compile", "--rounds", "1", "--iters", "1")
    assert "TARGET my_workload:make" in err and "ValueError: shapes do not line up" in err
    assert f"{tmp_path / 'my_workload.py'}:4" in err
    err = one_line_error(capsys, "diagnose", "my_workload:make_fails", "--no-compile")
    assert "TARGET my_workload:make_fails" in err and "RuntimeError: no data here" in err


# ---------------------------------------------------------------------------- result files

def test_result_files_are_readable_by_others(tmp_path: Path, fake) -> None:
    """Problem 10: results.json and manifest.json were created 0600 (mkstemp's mode)."""
    fake("graph_breaks", one_graph)
    old = os.umask(0o022)
    try:
        runner.run(SMOKE, tmp_path / "run", only=["graph_breaks"])
        from lab.atomic import write_json_atomic

        write_json_atomic(tmp_path / "env.json", {"a": 1})
    finally:
        os.umask(old)
    for path in (tmp_path / "run" / "results.json", tmp_path / "run" / "manifest.json", tmp_path / "env.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


# ---------------------------------------------------------------------------- report: hostile files, stale pages

def _corrupt(root: Path, name: str, edit) -> Path:
    run = root / name
    run.mkdir(parents=True)
    data = (FIXTURE_RUN / "results.json").read_bytes()
    (run / "results.json").write_bytes(edit(data))
    return run / "results.json"


def _json_edit(fn):
    def edit(data: bytes) -> bytes:
        raw = json.loads(data)
        fn(raw)
        return json.dumps(raw).encode()

    return edit


def _first_number(raw) -> None:
    for rec in raw["experiments"]:
        for m in rec["metrics"]:
            if isinstance(m["value"], float):
                m["value"] = "HUGE"
                return


def test_report_skips_every_hostile_file_by_name_and_renders_the_rest(tmp_path: Path, capsys) -> None:
    """Problems 3-4: one undecodable file or one field of an unexpected type aborted the whole report."""
    runs = tmp_path / "runs"
    bad = {
        "binary": _corrupt(runs, "binary", lambda d: b"\x00\xff\xfe" + d[:100]),
        "latin1": _corrupt(runs, "latin1", lambda d: d.decode().replace('"vm"', '"v\u00e9m"').encode("latin-1",
                                                                                                   "replace")),
        "host": _corrupt(runs, "host", _json_edit(lambda r: r["manifest"].__setitem__("host", "vm"))),
        "smi": _corrupt(runs, "smi", _json_edit(lambda r: r["manifest"]["gpu"].__setitem__("nvidia_smi", "x"))),
        "huge": _corrupt(runs, "huge", lambda d: _json_edit(_first_number)(d).replace(b'"HUGE"', b"1e400")),
        "deep": _corrupt(runs, "deep", lambda d: b"[" * 100_000 + b"]" * 100_000),
        "records": _corrupt(runs, "records", _json_edit(lambda r: r.__setitem__("experiments", {"a": 1}))),
        "nan": _corrupt(runs, "nan", lambda d: _json_edit(_first_number)(d).replace(b'"HUGE"', b"NaN")),
        "nested": _corrupt(runs, "nested", _json_edit(
            lambda r: r["experiments"][0]["notes"].__setitem__("deep", json.loads("[" * 600 + "]" * 600)))),
    }
    good = runs / "good"
    good.mkdir()
    (good / "results.json").write_bytes((FIXTURE_RUN / "results.json").read_bytes())
    out = tmp_path / "site"
    rc, err = cli(capsys, "report", str(runs), "--out", str(out))
    assert rc == 0, err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == len(bad) and all(len(ln) < 500 for ln in lines), err
    for name, path in bad.items():
        assert any(str(path) in ln for ln in lines), (name, err)
    assert "field manifest.host" in err and "field manifest.gpu.nvidia_smi" in err and "not UTF-8" in err
    assert "NaN is not a JSON value" in err
    assert "Traceback" not in err and (out / "index.html").exists()
    assert len(list(out.glob("run-*.html"))) == 1


@pytest.mark.slow
def test_report_into_an_old_folder_leaves_no_stale_pages(tmp_path: Path, capsys) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for run in (a, b):
        run.mkdir()
        (run / "results.json").write_bytes((FIXTURE_RUN / "results.json").read_bytes())
    out = tmp_path / "site"
    (out).mkdir()
    (out / "notes.txt").write_text("mine")
    assert cli(capsys, "report", str(a), str(b), "--out", str(out))[0] == 0
    assert {p.name for p in out.iterdir()} == {"index.html", "compare.html", "history.html", "run-a.html", "run-b.html",
                                                "notes.txt"}
    assert cli(capsys, "report", str(a), "--out", str(out))[0] == 0
    assert {p.name for p in out.iterdir()} == {"index.html", "run-a.html", "notes.txt"}
    assert "run-b.html" not in (out / "index.html").read_text()


# ---------------------------------------------------------------------------- children die with their run

HELPER = """
import os, time
from pathlib import Path

def sleep_and_tell(path):
    Path(path).write_text(str(os.getpid()))
    time.sleep(120)
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


# ---------------------------------------------------------------------------- the test suite itself

FAILING_TEST = """
import torch

def test_fails_after_compiling():
    torch.compile(lambda x: x * 2 + 1, backend="eager")(torch.ones(3))
    assert False, "the failure the reader should see"
"""


@pytest.mark.slow
def test_a_failing_test_shows_its_failure_not_torch_debug_logs(tmp_path: Path) -> None:
    """Problem 11: a failure carried ~950 lines of torch's DEBUG trace logging (pytest captured torch.__trace)."""
    test = tmp_path / "test_fails.py"
    test.write_text(FAILING_TEST)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c",
                          str(REPO_ROOT / "pyproject.toml"), "--rootdir", str(REPO_ROOT), str(test)],
                         capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
    assert "1 failed" in out.stdout and "the failure the reader should see" in out.stdout
    assert "DEBUG" not in out.stdout and "torch.__trace" not in out.stdout, out.stdout[-3000:]


def test_slow_tests_are_marked_and_the_quick_command_is_documented() -> None:
    """The `slow` marker was declared but never used: `-m "not slow"` must leave the heavy tests out."""
    slow = [p.name for p in (REPO_ROOT / "tests").glob("test_*.py") for _ in
            range(p.read_text().count("@pytest.mark.slow\n"))]
    assert len(slow) >= 10 and len(set(slow)) >= 5, slow
    assert 'nox -s tests -- -m "not slow"' in (REPO_ROOT / "README.md").read_text()


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
