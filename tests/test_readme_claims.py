"""The README's claims about the suite itself: the test command's line names how many tests there are and how many
need CUDA. Checked against this very session's collection when it collected the whole suite (`nox -s tests`, CI),
so a test added or removed without the README following fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
CLAIM = re.compile(r"the whole suite: ([\d,]+) tests \((\d+) skip without CUDA\)")


def claim(text: str) -> tuple[int, int]:
    """(tests, CUDA tests) as the README's test command line states them; ValueError where it states none."""
    found = CLAIM.search(text)
    if found is None:
        raise ValueError(f"{README.name}: no 'the whole suite: N tests (K skip without CUDA)' line")
    return int(found.group(1).replace(",", "")), int(found.group(2))


def test_the_claim_is_read_from_the_readme_s_own_words() -> None:
    assert claim("    nox -s tests   # the whole suite: 1,234 tests (56 skip without CUDA) in 9 min") == (1234, 56)
    with pytest.raises(ValueError, match="no 'the whole suite"):
        claim("nox -s tests")


def test_the_readme_states_the_suite_s_size(request: pytest.FixtureRequest) -> None:
    config = request.config
    whole = not config.option.keyword and not config.option.markexpr and not config.option.deselect and \
        {Path(a).resolve() for a in config.args} <= {README.parent / "tests"}
    if not whole:
        pytest.skip("checks the README's count only when the whole suite is collected (no -k, -m or paths)")
    items = request.session.items
    cuda = sum(1 for item in items if item.get_closest_marker("cuda") is not None)
    assert claim(README.read_text()) == (len(items), cuda), \
        f"the suite has {len(items):,} tests, {cuda} of them CUDA tests: update the README's test command line"
