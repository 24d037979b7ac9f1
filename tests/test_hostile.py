"""Folders the lab did not make (issue 30): a hostile colleague's run folders, a careless user's --out.

Each probe plants one thing (a link to a file outside, a FIFO, /dev/zero, a number too large for a float, a
second record of one experiment, a traces/ folder that is not the site's, a terminal escape in a folder's name)
and runs one command in this process. Every probe must end with one line (exit status 2 where the command can do
nothing else), no traceback, no hang, and the file outside exactly as it was.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Callable

import pytest

from lab.locks import GRACE_S, OWNER_NAME
from lab.run.manifest import REPO_ROOT

from cli_helpers import cli, one_graph

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "report_runs" / "cpu-smoke"
SECRET = b"the victim's own text\n"
RUN = ("run", "--profile", "smoke", "--only", "graph_breaks")


def talks(ctx) -> None:
    """The stand-in experiment: a library's line on file descriptor 2 (the run keeps it in stderr.log), a metric."""
    os.write(2, b"a library's line below Python\n")
    one_graph(ctx)


def fixture_run(folder: Path, edit: Callable[[dict], None] | None = None, text: str | None = None) -> Path:
    """The CPU smoke fixture run copied into `folder` (its results edited by `edit`, or replaced by `text`)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = json.loads((FIXTURE / "results.json").read_text())
    if edit is not None:
        edit(data)
    (folder / "results.json").write_text(text if text is not None else json.dumps(data))
    (folder / "manifest.json").write_bytes((FIXTURE / "manifest.json").read_bytes())
    return folder


def linked(target: Path, link: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return link


def fifo(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    os.mkfifo(folder / "results.json")
    return folder


def lock_to_victim(t: Path) -> Path:
    return linked(t / "outside" / "victim.txt", t / "RUN" / ".lab-run.lock").parent


def hard_lock_to_victim(t: Path) -> Path:
    (t / "RUN").mkdir()
    os.link(t / "outside" / "victim.txt", t / "RUN" / ".lab-run.lock")
    return t / "RUN"


def swept_owner_link(t: Path) -> None:
    """S2: a folder looking like the lab's abandoned temporary folder, its .lab-owner a link to the victim."""
    old = time.time() - GRACE_S - 3600
    os.utime(t / "outside" / "victim.txt", (old, old))
    linked(t / "outside" / "victim.txt", t / "tmp" / "lab-evil-x" / OWNER_NAME)


def _replace_first_wall(value: str) -> str:
    data = json.loads((FIXTURE / "results.json").read_text())
    data["experiments"][0]["wall_s"] = "WALL"
    return json.dumps(data).replace('"WALL"', value, 1)


def _metric_text(value: str) -> str:
    data = json.loads((FIXTURE / "results.json").read_text())
    rec = next(r for r in data["experiments"] if r["metrics"])
    rec["metrics"][0]["value"] = "VALUE"
    return json.dumps(data).replace('"VALUE"', value, 1)


def from_the_future(data: dict) -> None:
    data["run"]["started_at"] = "2999-01-01T00:00:00+00:00"


def duplicated(data: dict) -> None:
    data["experiments"].append(json.loads(json.dumps(data["experiments"][0])))


def own_traces(t: Path) -> Path:
    (t / "S" / "traces").mkdir(parents=True)
    (t / "S" / "traces" / "mine.txt").write_text("mine\n")
    return t / "S"


def traced_run(t: Path, name: str = "traced") -> Path:
    """A fixture run with one compile trace kept in its folder (the site then has a traces/ folder)."""
    from test_publish import make_run

    return make_run(t, name)


# probe id: (what to plant under tmp_path, returning the command's arguments; exit status; said on stderr)
PROBES: dict[str, tuple[Callable[[Path], list[str]], int, str]] = {
    "S1 lock is a link": (lambda t: [*RUN, "--out", str(lock_to_victim(t))], 2,
                          "its lock file .lab-run.lock is a symbolic link; links are never followed: remove it"),
    "S1 lock is a link, --resume": (lambda t: [*RUN, "--resume", "--out", str(lock_to_victim(t))], 2,
                                    "a symbolic link"),
    "S1 lock is a link, --force": (lambda t: [*RUN, "--force", "--out", str(lock_to_victim(t))], 2,
                                   "a symbolic link"),
    "S1 lock is a hard link": (lambda t: [*RUN, "--out", str(hard_lock_to_victim(t))], 2, "hard links"),
    "a run folder's stderr.log is a link": (
        lambda t: [*RUN, "--out", str(linked(t / "outside" / "victim.txt", t / "RUN" / "stderr.log").parent)], 0, ""),
    "S2 swept .lab-owner is a link": (lambda t: (swept_owner_link(t), [*RUN, "--out", str(t / "RUN")])[1], 0, ""),
    "S3 results.json is a link, report": (
        lambda t: ["report", str(linked(fixture_run(t / "outside" / "private") / "results.json",
                                        t / "h" / "symlinkrun" / "results.json").parent), "--out", str(t / "S")],
        2, "a symbolic link; links are never followed"),
    "S3 results.json is a link, compare": (
        lambda t: ["compare", str(fixture_run(t / "A")), str(linked(fixture_run(t / "outside" / "private") /
                                                                    "results.json", t / "B" / "results.json"))],
        2, "a symbolic link"),
    "B2 FIFO, report": (lambda t: ["report", str(fifo(t / "RUN")), "--out", str(t / "S")], 2, "a FIFO"),
    "B2 FIFO, compare": (lambda t: ["compare", str(fifo(t / "RUN")), str(fixture_run(t / "B"))], 2, "a FIFO"),
    "B2 FIFO, headline": (lambda t: ["headline", str(fifo(t / "RUN"))], 2, "a FIFO"),
    "B2 FIFO, run --resume": (lambda t: [*RUN, "--resume", "--out", str(fifo(t / "RUN"))], 2, "a FIFO"),
    "B3 /dev/zero, report": (lambda t: ["report", str(linked(Path("/dev/zero"), t / "RUN" / "results.json").parent),
                                        "--out", str(t / "S")], 2, "a symbolic link"),
    "B3 /dev/zero, compare": (lambda t: ["compare", str(linked(Path("/dev/zero"), t / "RUN" / "results.json")),
                                         str(fixture_run(t / "B"))], 2, "a symbolic link"),
    "B4 1e400, compare": (lambda t: ["compare", str(fixture_run(t / "A", text=_metric_text("1e400"))),
                                     str(fixture_run(t / "B"))], 2, "results.json: the number 1e400 is too large for a float"),
    "B4 10**400, headline": (lambda t: ["headline", str(fixture_run(t / "A", text=_metric_text("1" + "0" * 400)))],
                             2, "too large for a float"),
    "B4 wall_s 1e400, run --resume": (lambda t: [*RUN, "--resume", "--out",
                                                 str(fixture_run(t / "RUN", text=_replace_first_wall("1e400")))],
                                      2, "too large for a float"),
    "B5 a second record of one id": (lambda t: ["compare", str(fixture_run(t / "A", duplicated)),
                                                str(fixture_run(t / "B"))], 2, "again (first at experiments[0])"),
    "a start time in the future, report": (lambda t: ["report", str(fixture_run(t / "RUN", from_the_future)), "--out",
                                                      str(t / "S")], 2, "'2999-01-01T00:00:00+00:00' is in the future"),
    "B7 --out holds a traces/ of its own": (
        lambda t: ["report", str(traced_run(t)), "--out", str(own_traces(t))],
        2, "did not write"),
    "B7 --out is the run folder": (lambda t: ["report", str(traced_run(t)), "--out", str(t / "traced")], 2,
                                   "did not write"),
    "B11 a terminal escape in a folder's name": (
        lambda t: ["report", str(fixture_run(t / "good")), str(fixture_run(t / "evil\x1b[31m", text="{")),
                   "--out", str(t / "S")], 0, "evil\\x1b[31m"),
}


class Hung(Exception):
    pass


@pytest.mark.parametrize("probe", PROBES)
def test_a_hostile_folder_gives_one_line_and_touches_nothing_outside(probe: str, tmp_path: Path, capsys, fake,
                                                                    monkeypatch) -> None:
    import tempfile

    plant, status, said = PROBES[probe]
    fake("graph_breaks", talks)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    victim = tmp_path / "outside" / "victim.txt"
    victim.parent.mkdir()
    victim.write_bytes(SECRET)
    args = plant(tmp_path)
    outside = sorted(p.name for p in victim.parent.rglob("*"))
    planted = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()}

    def hung(*_: object) -> None:
        raise Hung(f"{probe}: still running after 60 s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)  # a guard against a hang, not a timing assertion: every probe ends in well under a second
    try:
        rc, err = cli(capsys, *args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert rc == status and said in err and "Traceback" not in err, (rc, err)
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert sum(said in line for line in lines) == (1 if said else 0), err  # one line names the file
    if status == 2:  # nothing but errors: the file's line, and the report's summary of what it could not render
        assert lines == err.splitlines() and len(lines) <= (2 if args[0] == "report" else 1), err
    assert "\x1b" not in err
    assert victim.read_bytes() == SECRET and sorted(p.name for p in victim.parent.rglob("*")) == outside
    assert not (tmp_path / "S" / "run-symlinkrun.html").exists() and not (tmp_path / "S" / "index.html").exists() \
        or status == 0
    if probe.startswith("S2"):
        assert (tmp_path / "tmp" / "lab-evil-x" / OWNER_NAME).is_symlink()  # not this user's folder to sweep
    if probe.startswith("S1"):
        assert (tmp_path / "RUN" / ".lab-run.lock").exists()  # the planted file is left as it was
    if probe.startswith("B7"):
        kept = tmp_path / ("S/traces/mine.txt" if "own" in probe else "traced/traces/model_scaling/tiny-2L/summary.json")
        assert kept.is_file()
    if status == 2:  # a refused command changed nothing it found (a resume left no `state: running` behind)
        assert all(path.read_bytes() == data for path, data in planted.items())
