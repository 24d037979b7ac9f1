"""graph_break_repair: RMS-normalisation with `.item()`, a Python `if` and `print`, against `torch.where`.

The broken step pulls the batch-wide peak into Python (a device-to-host sync on a GPU), branches on
it and prints it: Dynamo has to stop the graph at each of those. The repaired step computes both
candidates and selects in tensor space, clamping the divisor so the unselected branch stays finite
for an all-zero input. Equality is checked on the three validation inputs (rows of ones: peak ≈ 1,
kept; rows [4, 0, ...]: peak ≈ 4, divided; zeros: finite, kept), with the running-state rule and
unchanged inputs, outside the timed path. Then each version is timed eager and compiled.
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from dataclasses import dataclass
from typing import Any

import torch

from lab.contract import metrics as M
from lab.experiments.common.sweep import inductor_skip
from lab.measure.timing import compile_first_call, time_methods
from lab.measure.dynamo_tools import explain, quiet_dynamo
from lab.contract import notes as N
from lab.contract.names import Method
from lab.contract.options import option
from lab.run.context import Context

THRESHOLD = 3.0
EPS = 1e-6


@dataclass(frozen=True)
class Options:
    rows: int = option(2, "rows of the timed input", minimum=1)
    dim: int = option(16, "features per row of the timed input", minimum=1)
    iters: int = option(50, "timed calls per round", minimum=1)


def _rms(h: torch.Tensor) -> torch.Tensor:
    return h * torch.rsqrt(h.square().mean(dim=-1, keepdim=True) + EPS)


def step_with_breaks(h: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The hot step as first written: host scalar, Python branch, host I/O."""
    h = _rms(h)
    peak = h.abs().max().item()
    if peak > THRESHOLD:
        h = h / peak
    print(f"peak |h| = {peak:.3f}")
    return h, 0.9 * state + 0.1 * h


def step_repaired(h: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same arithmetic with the decision kept on the device (both candidates are computed)."""
    h = _rms(h)
    peak = h.abs().max()
    divisor = peak.clamp_min(torch.finfo(h.dtype).tiny)
    h = torch.where(peak > THRESHOLD, h / divisor, h)
    return h, 0.9 * state + 0.1 * h


VERSIONS = {"broken": step_with_breaks, "repaired": step_repaired}


def validation_inputs(rows: int, dim: int, device: torch.device) -> list[tuple[str, torch.Tensor, bool]]:
    """(label, input, whether the peak exceeds the threshold)."""
    ones = torch.ones(rows, dim, device=device)
    spike = torch.zeros(rows, dim, device=device)
    spike[:, 0] = 4.0  # at dim 16 the mean square is 16/16 = 1: normalised peak 4, divided to [1, 0, ...]
    return [("below", ones, False), ("above", spike, True), ("zero", torch.zeros(rows, dim, device=device), False)]


def _quiet_call(fn: Any, *args: Any) -> Any:
    with redirect_stdout(io.StringIO()), torch.no_grad():
        return fn(*args)


def run(ctx: Context[Options]) -> None:
    dev = ctx.device
    rows, dim = ctx.options.rows, ctx.options.dim
    ctx.note(N.SHAPE.key, [rows, dim])

    # 1. graph breaks of each version, with reasons (eager backend: no compiler needed)
    h0, s0 = torch.randn(rows, dim, device=dev), torch.full((rows, dim), 0.25, device=dev)
    for name, fn in VERSIONS.items():
        with redirect_stdout(io.StringIO()):
            e = explain(fn, h0, s0)
        ctx.metrics({M.GRAPHS: e.graphs, M.GRAPH_BREAKS: e.breaks}, version=name)
        ctx.note(N.FUNCTION_REASONS.key_for(name), e.reasons)
    ctx.check("repaired step: one graph, no break", ctx.record.metric(M.GRAPH_BREAKS.name, version="repaired").value == 0,
              detail=str(ctx.record.notes[N.FUNCTION_REASONS.key_for("repaired")]))
    ctx.check("broken step: at least one break", ctx.record.metric(M.GRAPH_BREAKS.name, version="broken").value >= 1,
              detail=str(ctx.record.notes[N.FUNCTION_REASONS.key_for("broken")]), fatal=False)

    # 2. equality on the validation inputs, outside timing (the chapter's shape (2, 16))
    for label, h_in, above in validation_inputs(2, 16, dev):
        state = torch.full_like(h_in, 0.25)
        h_before, s_before = h_in.clone(), state.clone()
        normalised = _rms(h_in)
        ref_h, ref_s = _quiet_call(step_with_breaks, h_in, state)
        got_h, got_s = _quiet_call(step_repaired, h_in, state)
        same = all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in ((got_h, ref_h), (got_s, ref_s)))
        finite = bool(torch.isfinite(got_h).all() and torch.isfinite(got_s).all())
        expect_h = h_in / 4.0 if above else normalised
        rule = torch.allclose(got_h, expect_h, rtol=1e-5, atol=1e-6) and torch.allclose(
            got_s, 0.9 * state + 0.1 * got_h, rtol=1e-5, atol=1e-6)
        untouched = torch.equal(h_in, h_before) and torch.equal(state, s_before)
        branch = bool(normalised.abs().max() > THRESHOLD) == above
        ctx.check(f"{label}: repaired equals broken", same, detail=f"max diff {float((got_h - ref_h).abs().max()):.2e}",
                  case=label)
        ctx.check(f"{label}: finite, expected value and state rule", finite and rule and branch, case=label,
                  detail=f"branch as expected: {branch}; first state value {float(got_s[0, 0]):.4f}")
        ctx.check(f"{label}: inputs unchanged", untouched, case=label)

    # 3. time: each version eager and compiled
    h, s = torch.randn(rows, dim, device=dev), torch.full((rows, dim), 0.25, device=dev)
    methods: dict[str, Any] = {f"{v}/{Method.EAGER}": (lambda f=f: _quiet_call(f, h, s)) for v, f in VERSIONS.items()}
    if not inductor_skip(ctx, "compiled timing of both versions"):
        for v, f in VERSIONS.items():
            c = compile_first_call(f, (h, s), dev, reset=True)
            ctx.metric(M.SETUP_S, round(c.setup_s, 3), version=v, method=Method.COMPILE_DEFAULT)
            methods[f"{v}/{Method.COMPILE_DEFAULT}"] = lambda cf=c.fn: _quiet_call(cf, h, s)
            got = _quiet_call(c.fn, h, s)
            want = _quiet_call(f, h, s)
            ctx.check(f"{v}: compiled equals eager", all(torch.allclose(a, b, rtol=1e-4, atol=1e-5)
                                                        for a, b in zip(got, want)), version=v)
    with quiet_dynamo():
        samples = time_methods(methods, ctx.clock, ctx.profile.rounds, ctx.options.iters, ctx.profile.warmup)
    for key, per_round in samples.items():
        version, method = key.split("/")
        ctx.timing(M.STEP_MS, per_round, version=version, method=method, rows=rows, dim=dim)
    base = samples[f"broken/{Method.EAGER}"]
    for key, per_round in samples.items():
        version, method = key.split("/")
        ctx.speedup(M.SPEEDUP_VS_BROKEN_EAGER, base, per_round, version=version, method=method)
