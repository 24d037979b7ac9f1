"""A run directory under misuse: one run at a time, never overwritten, resumed or moved aside on request."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from lab.contract import metrics as M
from lab.contract import profiles
from lab.run import runner
from lab.__main__ import main
from lab.run.manifest import REPO_ROOT
from lab.contract.results import load
from lab.run.rundir import LOCK_NAME, RunDirError
from lab.run.runstate import NotSaved

from cli_helpers import cli, one_compile, one_graph, one_line_error


SMOKE = profiles.get("smoke")


def test_a_second_run_into_a_busy_directory_refuses_naming_the_holder(tmp_path: Path, fake) -> None:
    """Problem 1: two runs into one --out both 'succeeded' and the first run's records were lost."""
    seen: dict[str, str] = {}

    def starts_another_run(ctx) -> None:
        ctx.metric(M.GRAPHS, 1)
        try:
            runner.run(SMOKE, tmp_path, only=["recompiles"])
        except RunDirError as exc:
            seen["error"] = str(exc)

    fake("graph_breaks", starts_another_run)
    res = runner.run(SMOKE, tmp_path, only=["graph_breaks"])
    assert "error" in seen, "the second run into the same directory was not refused"
    assert f"pid {os.getpid()}" in seen["error"] and f"host {socket.gethostname()}" in seen["error"]
    assert "\n" not in seen["error"]
    assert res.record("graph_breaks").status == "OK"
    assert [r.id for r in load(tmp_path).experiments] == ["graph_breaks"]
    assert not (tmp_path / LOCK_NAME).exists()  # released at the end


HOLD = """
import sys, time
from pathlib import Path
from lab.locks import OwnerLock
lock = OwnerLock(Path(sys.argv[1]))
assert lock.acquire() is None
print("holding", flush=True)
time.sleep(120)
"""


def test_the_lock_names_another_process_and_dies_with_it(tmp_path: Path, capsys, fake) -> None:
    fake("graph_breaks", one_graph)
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out / LOCK_NAME)], stdout=subprocess.PIPE, text=True,
                              cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        assert holder.stdout.readline().strip() == "holding"
        err = one_line_error(capsys, "run", "--profile", "smoke", "--only", "graph_breaks", "--out", str(out))
        assert f"pid {holder.pid}" in err and "another run is writing there" in err and str(out) in err
        assert not (out / "results.json").exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # SIGKILL left the lock file behind, but no lock: the next run goes ahead
    assert (out / LOCK_NAME).exists()
    assert main(["run", "--profile", "smoke", "--only", "graph_breaks", "--out", str(out)]) == 0
    assert load(out).record("graph_breaks").status == "OK"


def test_an_existing_run_is_refused_not_overwritten(tmp_path: Path, capsys, fake) -> None:
    """Problem 2: a rerun into a run directory silently replaced its records."""
    fake("graph_breaks", one_graph)
    fake("recompiles", one_compile)
    runner.run(SMOKE, tmp_path, only=["graph_breaks", "recompiles"])
    before = (tmp_path / "results.json").read_bytes()
    err = one_line_error(capsys, "run", "--profile", "smoke", "--only", "recompiles", "--out", str(tmp_path))
    assert "already holds a run" in err and "--resume" in err and "--force" in err
    assert (tmp_path / "results.json").read_bytes() == before


def test_resume_keeps_ok_records_reruns_the_rest_and_records_both_starts(tmp_path: Path, fake) -> None:
    fake("graph_breaks", one_graph)

    def fails(ctx) -> None:
        raise RuntimeError("first start: broken")

    def interrupted(ctx) -> None:
        ctx.metric(M.COMPILES, 7)
        raise KeyboardInterrupt

    fake("recompiles", fails)
    fake("decode_recompiles", interrupted)
    ids = ["graph_breaks", "recompiles", "decode_recompiles"]
    with pytest.raises(KeyboardInterrupt):
        runner.run(SMOKE, tmp_path, only=ids, argv=["first"])
    first = load(tmp_path)
    assert [(r.id, r.status) for r in first.experiments] == [
        ("graph_breaks", "OK"), ("recompiles", "FAILED"), ("decode_recompiles", "NOT_RUN")]
    kept = first.record("graph_breaks")

    fake("recompiles", one_compile)
    fake("decode_recompiles", one_compile)
    res = runner.run(SMOKE, tmp_path, argv=["second"], resume=True)  # the selection comes from the first start
    assert [(r.id, r.status) for r in res.experiments] == [(i, "OK") for i in ids]
    assert res.record("graph_breaks") == kept  # the very record of the first start
    assert res.run.state == "complete" and res.run.argv == ["first"]
    starts = res.run.starts
    assert [s.argv for s in starts] == [["first"], ["second"]] and starts[1].kept == ["graph_breaks"]
    assert starts[1].pid == os.getpid() and starts[1].host == socket.gethostname()
    assert starts[1].manifest_changes == []  # same environment
    assert load(tmp_path) == res
    assert set(json.loads((tmp_path / "manifest.json").read_text())["options"]) == set(ids)


def test_resume_refuses_another_profile_or_other_options_for_kept_records(tmp_path: Path, fake) -> None:
    fake("recompiles", one_compile)
    runner.run(SMOKE, tmp_path, only=["recompiles"])
    with pytest.raises(RunDirError, match="profile 'smoke'"):
        runner.run(profiles.get("cpu"), tmp_path, only=["recompiles"], resume=True)
    with pytest.raises(RunDirError, match=r"recompiles\.batch_sizes"):
        runner.run(SMOKE, tmp_path, resume=True, set_text={"recompiles": {"batch_sizes": "1,2"}})
    assert len(load(tmp_path).run.starts) == 1  # nothing was written


def test_force_moves_the_old_run_aside_and_deletes_nothing(tmp_path: Path, capsys, fake) -> None:
    fake("graph_breaks", one_graph)
    fake("recompiles", one_compile)
    out = tmp_path / "run"
    runner.run(SMOKE, out, only=["graph_breaks"])
    before = (out / "results.json").read_bytes()
    rc, err = cli(capsys, "run", "--profile", "smoke", "--only", "recompiles", "--out", str(out), "--force")
    assert rc == 0
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("run.old-")]
    assert len(aside) == 1 and (aside[0] / "results.json").read_bytes() == before
    assert (aside[0] / "manifest.json").exists() and not (aside[0] / LOCK_NAME).exists()
    assert [r.id for r in load(out).experiments] == ["recompiles"]
    assert str(aside[0]) in err


def test_resume_needs_the_directory_and_a_readable_run(tmp_path: Path, capsys) -> None:
    assert "--out" in one_line_error(capsys, "run", "--profile", "smoke", "--resume")
    (tmp_path / "results.json").write_bytes(b"\xff\xfe binary")
    err = one_line_error(capsys, "run", "--profile", "smoke", "--out", str(tmp_path), "--resume")
    assert "cannot resume" in err and "results.json" in err and "not UTF-8" in err


class FullDisk:
    """The atomic writer, made to fail as a full disk does (OSError ENOSPC, no file name) for `name` from its
    `after`-th write on, until `free()`."""

    def __init__(self, monkeypatch, name: str, after: int) -> None:
        import lab.atomic

        self.real, self.name, self.after, self.calls, self.full = lab.atomic.write_json_atomic, name, after, 0, True
        for module in ("lab.contract.results", "lab.run.runner"):
            monkeypatch.setattr(f"{module}.write_json_atomic", self)

    def __call__(self, path: Path, data) -> None:
        if path.name == self.name:
            self.calls += 1
            if self.full and self.calls >= self.after:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.real(path, data)

    def free(self) -> None:
        self.full = False


def run_error(capsys, *args: str) -> str:
    """The one error line a run ended with (exit status 2, no traceback; the run's own lines come before it)."""
    rc, err = cli(capsys, *args)
    last = err.splitlines()[-1]
    assert rc == 2 and last.startswith("error: ") and "Traceback" not in err, (rc, err)
    return last


def test_a_full_disk_names_the_file_the_lost_record_and_how_to_resume(tmp_path: Path, capsys, fake,
                                                                      monkeypatch) -> None:
    fake("graph_breaks", one_graph)
    fake("recompiles", one_compile)
    disk = FullDisk(monkeypatch, "results.json", after=3)  # the start's save, graph_breaks', then recompiles' fails
    err = run_error(capsys, "run", "--profile", "smoke", "--only", "graph_breaks,recompiles", "--out", str(tmp_path))
    assert str(tmp_path / "results.json") in err and "No space left on device" in err
    assert "the record of recompiles (OK" in err and "1 record(s) before it are" in err
    assert f"--resume --out {tmp_path}" in err
    assert [r.id for r in load(tmp_path).experiments] == ["graph_breaks"]
    disk.free()
    rc, err = cli(capsys, "run", "--profile", "smoke", "--out", str(tmp_path), "--resume")
    assert rc == 0 and [(r.id, r.status) for r in load(tmp_path).experiments] == [("graph_breaks", "OK"),
                                                                                  ("recompiles", "OK")]


def test_a_run_that_saved_only_its_manifest_is_resumable(tmp_path: Path, capsys, fake, monkeypatch) -> None:
    fake("graph_breaks", one_graph)
    disk = FullDisk(monkeypatch, "results.json", after=1)
    err = run_error(capsys, "run", "--profile", "smoke", "--only", "graph_breaks", "--out", str(tmp_path))
    assert str(tmp_path / "results.json") in err and "no experiment of this start has run yet" in err
    assert (tmp_path / "manifest.json").exists() and not (tmp_path / "results.json").exists()
    disk.free()
    assert "--resume" in one_line_error(capsys, "run", "--profile", "smoke", "--only", "graph_breaks", "--out",
                                        str(tmp_path))
    rc, err = cli(capsys, "run", "--profile", "smoke", "--only", "graph_breaks", "--out", str(tmp_path), "--resume")
    assert rc == 0 and "had saved no record" in err
    assert load(tmp_path).record("graph_breaks").status == "OK"


def test_a_manifest_only_resume_still_refuses_another_profile_definition(tmp_path: Path, fake, monkeypatch) -> None:
    import dataclasses

    fake("graph_breaks", one_graph)
    disk = FullDisk(monkeypatch, "results.json", after=1)
    with pytest.raises(NotSaved):
        runner.run(SMOKE, tmp_path, only=["graph_breaks"])
    disk.free()
    with pytest.raises(RunDirError, match=r"profile\.decode_steps"):
        runner.run(dataclasses.replace(SMOKE, decode_steps=SMOKE.decode_steps + 1), tmp_path, only=["graph_breaks"],
                   resume=True)
    assert not (tmp_path / "results.json").exists()


def test_temporary_files_of_a_killed_save_are_removed_at_the_next_start(tmp_path: Path, capsys, fake) -> None:
    fake("graph_breaks", one_graph)
    fake("recompiles", one_compile)
    runner.run(SMOKE, tmp_path, only=["graph_breaks", "recompiles"])
    strays = [tmp_path / ".results.json.k1ll3d.tmp", tmp_path / ".manifest.json.x9.tmp"]
    for stray in strays:
        stray.write_text('{"half": ')
    unrelated = tmp_path / ".notes.tmp"
    unrelated.write_text("mine")
    rc, err = cli(capsys, "run", "--profile", "smoke", "--out", str(tmp_path), "--resume")
    assert rc == 0 and not any(p.exists() for p in strays) and unrelated.exists()
    assert "removed 2 temporary file(s)" in err and ".results.json.k1ll3d.tmp" in err


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
