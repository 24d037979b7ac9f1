"""`python -m lab headline RUN --check README.md`, the form the README writes, and `--check README.md` alone."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from report_helpers import gpu_fixture

from lab.__main__ import main
from report.pages import headline

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with two runs and a README whose headline block is made from `runs/a` (the working directory)."""
    for name in ("a", "b"):
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        (run / "results.json").write_text(json.dumps(copy.deepcopy(gpu_fixture.build())))
    readme = tmp_path / "README.md"
    readme.write_text("# Title\n\n<!-- headline:begin x -->\n<!-- headline:end -->\n")
    headline.write(readme, ["runs/a"])
    monkeypatch.chdir(tmp_path)
    return readme


@pytest.mark.parametrize("run", ["runs/a", "runs/a/", "runs/a/results.json", "ABSOLUTE"])
def test_run_and_check_as_the_readme_writes_it(made: Path, run: str, capsys) -> None:
    run = str(made.parent / "runs" / "a") if run == "ABSOLUTE" else run
    assert main(["headline", run, "--check", "README.md"]) == 0
    assert capsys.readouterr().out.strip() == "README.md: headline tables match runs/a"


def test_check_alone_reads_the_runs_from_the_marker(made: Path, capsys) -> None:
    assert main(["headline", "--check", "README.md"]) == 0
    assert capsys.readouterr().out.strip() == "README.md: headline tables match runs/a"


def test_a_run_the_marker_does_not_name_fails_the_check(made: Path, capsys) -> None:
    """The same tables (the two runs hold the same records) made from another run are not that run's."""
    assert main(["headline", "runs/b", "--check", "README.md"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == ("README.md: headline tables are of runs/a (its marker), not of runs/b: remake them with "
                   "`python -m lab headline runs/b --write README.md`")


def test_an_edited_block_fails_the_check_with_the_run(made: Path, capsys) -> None:
    made.write_text(made.read_text().replace("×)", "x)", 1))
    assert main(["headline", "runs/a", "--check", "README.md"]) == 1
    assert "headline tables differ from runs/a: remake them" in capsys.readouterr().err


def test_the_readmes_own_form_passes_on_this_repository(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """`python -m lab headline <the run the README's marker names> --check README.md`, from the repository root."""
    _, _, runs = headline.find_block((ROOT / "README.md").read_text())
    monkeypatch.chdir(ROOT)
    assert main(["headline", *runs, "--check", "README.md"]) == 0, capsys.readouterr().err
