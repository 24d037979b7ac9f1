"""`lab list`: every experiment of the catalogue (and of the lab book, where there is one) is listed."""

from __future__ import annotations

from lab.contract import catalogue
from lab.__main__ import main
from lab.run.manifest import REPO_ROOT


def test_every_lab_book_id_is_listed(capsys) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    book = (REPO_ROOT.parent / "shared" / "LAB_BOOK.md")
    ids = [s.id for s in catalogue.CATALOGUE]
    for i in ids:
        assert i in out
    if book.exists():
        import re

        listed = set(re.findall(r"^\| `([a-z_]+)` \|", book.read_text(), flags=re.M))
        assert listed <= set(ids), listed - set(ids)
