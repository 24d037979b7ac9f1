"""report.site.provenance: the lab's commit and tree state as a run recorded them, on the front page, the run's
header and the README's headline block."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from report.pages import headline
from report import render_site
from report.site.provenance import tree_state
from synthetic_runs import decode, results, write_run


@pytest.mark.parametrize(("lab", "said"), [
    ({"commit": "7c5301c68d20a1a7", "dirty": False, "source": "git"}, "lab 7c5301c, clean tree"),
    ({"commit": "7c5301c68d20a1a7", "dirty": True, "source": "git"}, "lab 7c5301c + uncommitted changes"),
    ({"commit": "7c5301c68d20a1a7", "dirty": False, "source": "stamp"}, "lab 7c5301c (from a stamp), clean tree"),
    ({"commit": "7c5301c", "dirty": None, "source": "LAB_COMMIT"}, "lab 7c5301c (from LAB_COMMIT), tree state unknown"),
    ({"commit": None, "dirty": None, "source": None}, "lab commit unknown"),
    (None, "lab commit unknown"),
])
def test_the_tree_state_says_what_the_manifest_recorded(lab, said) -> None:
    assert tree_state(results(decode({"eager": 3.0, "graph": 0.6}), manifest={"lab": lab})) == said


def test_the_front_page_the_run_header_and_the_readme_block_state_it(tmp_path: Path) -> None:
    run = write_run(tmp_path / "runs" / "r", decode({"eager": 3.0, "graph": 0.6}, correct={"eager": True, "graph": True}),
                    manifest={"lab": {"commit": "abcdef0123", "dirty": True, "source": "git"}})
    site = render_site([run], tmp_path / "site")
    assert "lab abcdef0 + uncommitted changes" in site.index.read_text()
    assert "lab abcdef0 + uncommitted changes" in (site.out / site.run_pages[0].file).read_text()
    block = headline.render([run], shown=["runs/r"])
    assert "Measured by `runs/r`: lab abcdef0 + uncommitted changes." in block
    data = json.loads((run / "results.json").read_text())
    data["manifest"]["lab"]["dirty"] = False
    (run / "results.json").write_text(json.dumps(data))
    assert "Measured by `runs/r`: lab abcdef0, clean tree." in headline.render([run], shown=["runs/r"])
