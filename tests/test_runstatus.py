"""Incomplete runs are visible (report.sections.runstatus): a run killed before it finished says "incomplete" on the front
page and its own page, with the experiments asked for and never recorded; a run started several times lists each
start and what changed between them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lab.contract.results import load
from lab.run.manifest import REPO_ROOT
from report import render_site
from report.sections.runstatus import status

from report_helpers import table, texts

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "report_runs" / "cpu-smoke"
KEPT = ("toolchain", "graph_breaks", "recompiles")


def write_run(folder: Path, edit) -> Path:
    data = json.loads((FIXTURE / "results.json").read_text())
    edit(data)
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(data))
    (folder / "manifest.json").write_text(json.dumps(data["manifest"]))
    return folder


def killed(data: dict) -> None:
    """SIGKILL after three records of an --only run of five: the state stays running, two never recorded."""
    data["run"].update(state="running", finished_at=None, only=[*KEPT, "ceilings", "inductor"])
    data["experiments"] = [r for r in data["experiments"] if r["id"] in KEPT]


def resumed(data: dict) -> None:
    data["run"]["starts"] = [
        {"started_at": "2026-11-29T12:16:04+00:00", "argv": ["lab", "run"], "host": "vm", "pid": 10},
        {"started_at": "2026-11-29T13:00:00+00:00", "argv": ["lab", "run", "--resume"], "host": "vm", "pid": 11,
         "kept": ["toolchain", "graph_breaks"], "manifest_changes": ["lab.commit", "torch.version"]},
    ]


def test_a_killed_run_is_incomplete_with_what_it_never_recorded(tmp_path: Path) -> None:
    run = write_run(tmp_path / "runs" / "killed", killed)
    st = status(load(run / "results.json"))
    assert st.incomplete and st.missing == ["ceilings", "inductor"]
    site = render_site([run], tmp_path / "site")
    index = site.index.read_text()
    line = texts(index, "incomplete bad")
    assert line == ["incomplete: the run is running (still under way, or killed before it could record the rest); "
                    "2 experiments asked for and not recorded: ceilings, inductor"]
    page = site.pages[0].read_text()
    alert = re.search(r'<div class="alert" id="incomplete">(.*?)</div>', page, re.S)
    assert alert and "ceilings, inductor" in alert.group(1) and "Incomplete run" in alert.group(1)


def test_an_interrupted_run_without_only_uses_its_profiles_experiments(tmp_path: Path) -> None:
    def interrupted(data: dict) -> None:
        data["run"].update(state="interrupted", only=None)
        data["experiments"] = [r for r in data["experiments"] if r["id"] != "amdahl"]

    st = status(load(write_run(tmp_path / "r", interrupted) / "results.json"))
    assert st.incomplete and st.missing == ["amdahl"] and "Ctrl-C" in st.text


def test_a_run_stopped_at_its_budget_is_incomplete_and_says_resume(tmp_path: Path) -> None:
    def stopped(data: dict) -> None:
        killed(data)
        data["run"]["state"] = "stopped"

    st = status(load(write_run(tmp_path / "r", stopped) / "results.json"))
    assert st.incomplete and st.missing == ["ceilings", "inductor"]
    assert "the run is stopped (stopped at its --stop-after time budget" in st.text and "--resume" in st.text


@pytest.mark.slow
def test_a_complete_run_is_not_marked(tmp_path: Path) -> None:
    st = status(load(FIXTURE / "results.json"))
    assert not st.incomplete and st.text == "" and st.starts is None
    site = render_site([FIXTURE], tmp_path / "site")
    assert 'class="incomplete' not in site.index.read_text() and 'id="incomplete"' not in site.pages[0].read_text()


def test_an_unknown_profile_says_what_it_cannot_know(tmp_path: Path) -> None:
    def odd(data: dict) -> None:
        killed(data)
        data["run"].update(profile="from-the-future", only=None)

    st = status(load(write_run(tmp_path / "r", odd) / "results.json"))
    assert st.incomplete and st.missing == [] and "not known here" in st.text


@pytest.mark.slow
def test_every_start_is_shown_with_what_changed(tmp_path: Path) -> None:
    run = write_run(tmp_path / "runs" / "resumed", resumed)
    site = render_site([run], tmp_path / "site")
    t = table(site.pages[0].read_text(), id="starts")
    rows = [[c[0] for c in r] for r in t["rows"][1:]]
    # load and usable cores: "—" for starts recorded before they were (this fixture's)
    assert rows == [["1", "2026-11-29T12:16:04+00:00", "vm", "lab run", "—", "—", "—", "(the first start)"],
                    ["2", "2026-11-29T13:00:00+00:00", "vm", "lab run --resume", "—", "—", "toolchain, graph_breaks",
                     "lab.commit, torch.version"]]


@pytest.mark.parametrize("starts", [0, 1])
def test_a_single_start_draws_no_table(tmp_path: Path, starts: int) -> None:
    def one(data: dict) -> None:
        resumed(data)
        data["run"]["starts"] = data["run"]["starts"][:starts]

    assert status(load(write_run(tmp_path / "r", one) / "results.json")).starts is None
