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


# ---------------------------------------------------------------------------- views: one block each

@pytest.fixture
def two(made: Path) -> Path:
    """`made`'s README with a compile block made from `runs/b` below its default block (from `runs/a`)."""
    made.write_text(made.read_text() + "\ntext between\n\n<!-- headline:begin[compile] -->\n<!-- headline:end -->\n")
    assert main(["headline", "runs/b", "--view", "compile", "--write", "README.md"]) == 0
    return made


def test_write_with_a_view_replaces_only_that_block(two: Path, capsys) -> None:
    text = two.read_text()
    default = text.split("<!-- headline:begin[compile]")[0]
    assert default == headline.marker("default", ["runs/a"]).join(["# Title\n\n", "\n"]) + headline.render(
        ["runs/a"]) + "<!-- headline:end -->\n\ntext between\n\n"  # the default block and the text as they were
    assert "<!-- headline:begin[compile] runs/b -->\n<!-- made by `python -m lab headline runs/b --view compile" in text
    assert "Compiled methods (cuda_graph_decode), per case" in text.split("<!-- headline:begin[compile]")[1]
    assert text.endswith("<!-- headline:end -->\n") and text.count("<!-- headline:end -->") == 2
    capsys.readouterr()
    assert main(["headline", "runs/b", "--view", "compile", "--write", "README.md"]) == 0
    assert two.read_text() == text and "headline[compile] tables unchanged from runs/b" in capsys.readouterr().out


def test_check_checks_every_block_and_names_the_one_that_differs(two: Path, capsys) -> None:
    capsys.readouterr()
    assert main(["headline", "--check", "README.md"]) == 0
    assert capsys.readouterr().out.splitlines() == ["README.md: headline tables match runs/a",
                                                    "README.md: headline[compile] tables match runs/b"]
    head, compiled = two.read_text().split("<!-- headline:begin[compile]")
    two.write_text(head + "<!-- headline:begin[compile]" + compiled.replace("reference", "referee", 1))
    assert main(["headline", "--check", "README.md"]) == 1
    out = capsys.readouterr()
    assert out.out.strip() == "README.md: headline tables match runs/a"
    assert out.err.strip() == ("README.md: headline[compile] tables differ from runs/b: remake them with "
                               "`python -m lab headline runs/b --view compile --write README.md`")


def test_run_with_check_is_compared_with_the_views_block(two: Path, capsys) -> None:
    assert main(["headline", "runs/b", "--view", "compile", "--check", "README.md"]) == 0
    assert main(["headline", "runs/a", "--check", "README.md"]) == 0
    capsys.readouterr()
    assert main(["headline", "runs/a", "--view", "compile", "--check", "README.md"]) == 1
    assert capsys.readouterr().err.strip() == (
        "README.md: headline[compile] tables are of runs/b (its marker), not of runs/a: remake them with "
        "`python -m lab headline runs/a --view compile --write README.md`")


def test_write_to_a_readme_without_the_views_block_is_one_line(made: Path, capsys) -> None:
    text = made.read_text()
    assert main(["headline", "runs/a", "--view", "compile", "--write", "README.md"]) == 2
    err = capsys.readouterr().err
    assert err == ("error: README.md has no headline[compile] block: add the empty pair "
                   "`<!-- headline:begin[compile] -->` and `<!-- headline:end -->`, each on a line of its own, where "
                   "its tables go, then write it again\n")
    assert made.read_text() == text
    assert main(["headline", "runs/a", "--view", "nope"]) == 2
    assert capsys.readouterr().err == "error: unknown headline view 'nope' (views: default, compile)\n"
