"""lab/run/turns.py: a fresh child that stays alive and answers its parent's requests one at a time, over a pipe."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lab.run import turns
from lab.run.manifest import REPO_ROOT

HELPER = """
import sys
from lab.run import turns

def double(start):
    chan = turns.channel()
    print("chatter on stdout", flush=True)
    chan.answer({"ready": start})
    n = 0
    while (req := chan.request()) is not None:
        n += 1
        chan.answer({"value": req["x"] * 2})
    return {"answered": n}

def die():
    turns.channel().answer({"ready": True})
    sys.exit(3)
"""


posix = pytest.mark.skipif(not turns.supported(), reason="lab.run.turns passes file descriptors: POSIX only")


@pytest.fixture
def helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "lab_turns_helper.py").write_text(HELPER)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{REPO_ROOT}")


@posix
def test_the_child_answers_each_request_then_returns_its_value(helper: None) -> None:
    with turns.Turns("lab_turns_helper:double", {"start": 5}, timeout_s=60) as child:
        assert child.wait() == {"ready": 5}
        assert [child.ask({"x": x})["value"] for x in (1, 2, 3)] == [2, 4, 6]
        res = child.finish()
    assert res.ok and res.value == {"answered": 3} and "chatter" in res.stdout_tail


@posix
def test_a_child_that_ends_early_is_child_gone_and_its_exit_is_kept(helper: None) -> None:
    with turns.Turns("lab_turns_helper:die", {}, timeout_s=60) as child:
        assert child.wait() == {"ready": True}
        with pytest.raises(turns.ChildGone):
            child.ask({"x": 1})
        res = child.finish()
    assert res.exit_code == 3 and not res.ok


def test_a_process_not_started_by_turns_has_no_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(turns.TURNS_ENV, raising=False)
    assert turns.channel() is None
