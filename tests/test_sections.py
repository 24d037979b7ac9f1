"""The sections of a run's page: the starts of a resumed run, under the experiments' status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from report import render_site
from report_helpers import FIXTURES, row, table

START = {"argv": ["lab", "run"], "host": "h1", "pid": 10, "kept": [], "manifest_changes": []}


def _resumed_run(tmp_path: Path) -> Path:
    data = json.loads((FIXTURES / "report_runs" / "cpu-smoke" / "results.json").read_text())
    data["run"]["starts"] = [
        {**START, "started_at": "2025-01-01T10:00:00+00:00", "load_average": [0.25, 0.5, 0.75], "usable_cores": 2},
        {**START, "started_at": "2025-01-01T11:00:00+00:00", "load_average": [5.5, 4.0, 3.0], "usable_cores": 2,
         "pid": 11, "kept": ["graph_breaks"], "manifest_changes": ["lab.source_sha256"]},
    ]
    run = tmp_path / "runs" / "resumed"
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps(data))
    return run


@pytest.mark.slow
def test_the_run_page_shows_each_start_with_its_load(tmp_path: Path) -> None:
    run = _resumed_run(tmp_path)
    site = render_site([run], tmp_path / "site")
    html = (site.out / site.run_pages[0].file).read_text()
    starts = table(html, id="starts")
    assert row(starts, "1")[4][0] == "0.25, 0.50, 0.75"  # one table of starts (report.sections.runstatus): load, cores, ...
    second = [cell for cell, _ in row(starts, "2")]
    assert second[4] == "5.50, 4.00, 3.00" and second[5] == "2"
    assert second[6] == "graph_breaks" and second[7] == "lab.source_sha256"


@pytest.mark.slow
def test_a_run_started_once_has_no_starts_table(tmp_path: Path) -> None:
    run = _resumed_run(tmp_path)
    data = json.loads((run / "results.json").read_text())
    data["run"]["starts"] = data["run"]["starts"][:1]
    (run / "results.json").write_text(json.dumps(data))
    site = render_site([run], tmp_path / "site")
    assert 'id="starts"' not in (site.out / site.run_pages[0].file).read_text()
