"""Calling `python -m lab` in the test's own process and reading what it said; quick stand-ins for experiments
(the `fake` fixture in conftest.py puts them in place)."""

from __future__ import annotations

from lab.contract import metrics as M
from lab.__main__ import main


def one_graph(ctx) -> None:
    ctx.metric(M.GRAPHS, 1)


def one_compile(ctx) -> None:
    ctx.metric(M.COMPILES, 1)


def cli(capsys, *args: str) -> tuple[int, str]:
    """`python -m lab ARGS` in this process: (exit status, what it printed on stderr)."""
    capsys.readouterr()
    rc = main(list(args))
    return rc, capsys.readouterr().err.strip()


def one_line_error(capsys, *args: str) -> str:
    """The one line `python -m lab ARGS` refused with (exit status 2, no traceback)."""
    rc, err = cli(capsys, *args)
    assert rc == 2 and err.startswith("error: ") and "\n" not in err and "Traceback" not in err, (rc, err)
    return err
