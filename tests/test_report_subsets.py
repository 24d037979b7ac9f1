"""A run of any subset of experiments renders: each experiment of the CPU smoke fixture and of the GPU fixture,
alone in its run (as a fleet's or a user's `--only` makes it), gives a page, and a run page that names it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from lab.contract.results import RESULTS_NAME
from report import render_site
from report_helpers import FIXTURES, gpu_fixture

CPU = json.loads((FIXTURES / "report_runs" / "cpu-smoke" / RESULTS_NAME).read_text())
GPU = gpu_fixture.build()


def alone(data: dict[str, Any], rid: str) -> dict[str, Any]:
    one = copy.deepcopy(data)
    one["experiments"] = [r for r in one["experiments"] if r["id"] == rid]
    return one


CASES = [(name, rec["id"]) for name, data in (("cpu", CPU), ("gpu", GPU)) for rec in data["experiments"]]


@pytest.mark.parametrize(("fixture", "rid"), CASES, ids=[f"{f}-{r}" for f, r in CASES])
def test_an_experiment_alone_in_its_run_renders(tmp_path: Path, fixture: str, rid: str) -> None:
    run = tmp_path / "runs" / rid
    run.mkdir(parents=True)
    (run / RESULTS_NAME).write_text(json.dumps(alone(CPU if fixture == "cpu" else GPU, rid)))
    site = render_site([run], tmp_path / "site")
    assert not site.skipped, site.skipped
    assert rid in (site.out / site.run_pages[0].file).read_text()
