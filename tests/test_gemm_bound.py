"""lab/experiments/gemm_bound.py: "compile gives about 1.0x", judged by the speedup's interval, and on the CPU told
apart from what the host's speed did over the rounds (the host-speed index)."""

from __future__ import annotations

import itertools
import types

import pytest

from lab.contract import notes as N
from lab.contract import profiles
from lab.contract.catalogue import BY_ID
from lab.contract.intervals import Interval
from lab.experiments import gemm_bound
from lab.measure.hostspeed import HostIndex
from lab.run import runner


def test_about_one_is_the_interval_against_the_band_and_a_moving_host_excuses_a_miss() -> None:
    name, passed, detail, hosts = gemm_bound.about_one(0.97, Interval(0.9, 1.05))
    assert passed and not hosts and name.startswith("compile gives about 1.0x") and detail == "0.97x, 95% interval [0.9, 1.05]"
    assert gemm_bound.about_one(0.95, Interval(0.5, 0.86))[1]  # overlaps the band: cannot show it is not 1.0x
    assert not gemm_bound.about_one(0.75, Interval(0.314, 0.763))[1]  # wholly below, no index: the lab's
    _, passed, detail, hosts = gemm_bound.about_one(0.75, Interval(0.314, 0.763), moved=1.05)
    assert not passed and not hosts and detail.endswith("the host-speed index moved 1.05x (p95/p5) over the rounds")
    _, passed, detail, hosts = gemm_bound.about_one(0.75, Interval(0.314, 0.763), moved=1.8)
    assert passed and hosts and detail.endswith("moved 1.80x (p95/p5) over the rounds: the host moved, not the lab (a host warning)")
    _, passed, detail, hosts = gemm_bound.about_one(1.0, Interval(0.95, 1.05), moved=1.8)  # inside: no warning
    assert passed and not hosts and not detail.endswith("(a host warning)")
    assert not gemm_bound.about_one(2.0, None)[1] and "fewer than two rounds" in gemm_bound.about_one(2.0, None)[2]


def _run(monkeypatch, index_ms: list[float], eager_ms: float, compiled_ms: float):
    """gemm_bound on the smoke profile through the runner, with its timings and the host index's loop stood in for
    (turns of 60-120 ms against a loop of 1-2 ms: each turn has its own two samples, as on the cpu profile):
    each method's samples fixed (and as long on the index's clock), the index's loop taking `index_ms` in turn."""
    loop = itertools.cycle(index_ms)
    clock = [0.0]

    def work() -> None:
        clock[0] += next(loop) / 1e3

    monkeypatch.setattr(gemm_bound, "HostIndex", lambda: HostIndex(now=lambda: clock[0], work=work))

    def timed(methods, clock_, rounds, iters, warmup=2, index=None):
        per = {gemm_bound.Method.EAGER: eager_ms, gemm_bound.Method.COMPILE_DEFAULT: compiled_ms}
        out = {m: [] for m in methods}

        def turn(m: str, r: int) -> list[float]:
            xs = [per[m] * (1 + 0.01 * (r + i)) for i in range(iters)]
            clock[0] += sum(xs) / 1e3  # (the turn's time on the index's clock)
            return xs

        for r in range(rounds):
            for m in methods:
                out[m].append(index.turn(str(m), lambda m=m: turn(m, r)))
        index.close()
        return out

    monkeypatch.setattr(gemm_bound, "time_methods", timed)
    monkeypatch.setattr(runner, "prerequisite_reason", lambda *args: None)  # (the smoke profile's: the CPU)
    return runner.run_experiment(BY_ID["gemm_bound"], profiles.get("smoke"), None,
                                 types.SimpleNamespace(experiments=[]), None)


@pytest.mark.slow  # (it compiles the smoke model's MLP: seconds)
def test_on_the_cpu_a_miss_while_the_index_moved_is_a_host_warning_not_a_failed_check(monkeypatch) -> None:
    held = _run(monkeypatch, [1.0], eager_ms=20.0, compiled_ms=40.0)  # compile 0.5x, the host held still
    assert held.status == "OK", (held.reason, held.error)
    [check] = [c for c in held.checks if c.name.startswith("compile gives about 1.0x")]
    assert not check.passed and "moved 1.00x" in check.detail and N.HOST_WARNINGS.key not in held.notes, check
    assert set(held.notes[N.HOST_INDEX.key_for(shape="b128")]["turns"]) == {"eager", "compile-default"}

    moved = _run(monkeypatch, [1.0, 2.0, 1.2], eager_ms=20.0, compiled_ms=40.0)  # the same miss, the host moving
    [check] = [c for c in moved.checks if c.name.startswith("compile gives about 1.0x")]
    assert check.passed and check.detail.endswith("(a host warning)")
    [warning] = moved.notes[N.HOST_WARNINGS.key]
    assert warning.startswith("gemm_bound's speedup 0.50x") and "the host moved, not the lab" in warning
