"""lab/measure/breakeven.py: break-even and amortisation arithmetic."""

from __future__ import annotations

import pytest

from lab.measure.breakeven import break_even_calls


def test_break_even_matches_the_chapter() -> None:
    # 25.7 s cold to save 6.9 ms per step: 3,725 steps (the chapter's 3,715 came from unrounded times)
    assert break_even_calls(25.7, 42.0, 35.1) == 3725
    assert break_even_calls(0.18, 16.5, 3.4) == 14  # the graph: pays back in 14 steps
    assert break_even_calls(0.0, 2.0, 1.0) == 0


def test_break_even_never_when_nothing_is_saved() -> None:
    assert break_even_calls(1.0, 1.0, 1.0) is None
    assert break_even_calls(1.0, 1.0, 2.0) is None
    with pytest.raises(ValueError):
        break_even_calls(-1.0, 1.0, 0.5)

