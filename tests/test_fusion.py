"""lab/experiments/fusion.py: the fusion arithmetic; fusion as its user watches it: each compile line says which
residency it is for."""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

import pytest
import torch

from lab import console
from lab.contract import profiles
from lab.contract.catalogue import BY_ID
from lab.contract.results import Record
from lab.experiments import fusion
from lab.measure import timing
from lab.run.context import Context


def test_each_compile_line_names_its_residency(monkeypatch: pytest.MonkeyPatch) -> None:
    """One compile per chain and residency: as many distinct lines, each naming the residency it compiles for."""
    monkeypatch.setenv("LAB_PROGRESS_EVERY_S", "0")  # every activity's start is said
    monkeypatch.setattr(timing.torch, "compile", lambda fn, **kwargs: fn)  # the lines, not Inductor, are tested
    options = fusion.Options(n_ops=(1, 2), cache_bytes=4096, memory_bytes=8192, rounds=1, iters_cache=1,
                             iters_memory=1)
    ctx = Context(BY_ID["fusion"], profiles.get("smoke"), None, Record("fusion", "fusion", "OK"),
                  SimpleNamespace(experiments=[]), None, options)
    buf = io.StringIO()
    console.use_stream(buf)
    try:
        console.begin_run()
        fusion.run(ctx)
    finally:
        console.use_stream(None)
    compiles = [ln.strip() for ln in buf.getvalue().splitlines() if ln.strip().startswith("compiling ")
                and ln.endswith(" ...")]
    assert compiles == [f"compiling chain_{n}, {res}-resident input (first call) ..."
                        for n in (1, 2) for res in ("cache", "memory")], buf.getvalue()
    assert all(re.search(r"(cache|memory)-resident", ln) for ln in buf.getvalue().splitlines()
               if "compiling" in ln)


def test_fusion_arithmetic() -> None:
    assert fusion.bytes_moved(3, 100, fused=False) == 600 and fusion.bytes_moved(3, 100, fused=True) == 200
    x = torch.rand(10)
    y = fusion.make_chain(4)(x)
    torch.testing.assert_close(y, ((x * 1.0001 + 0.001) * 0.9999) - 0.0005)
