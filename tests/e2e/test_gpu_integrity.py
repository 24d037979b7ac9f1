"""On CUDA: the profiler leaves no residue on the lab's timings, and the sentinel runs.

The eager GPT-2 124M step at batch 1, timed in a process after a kernel profile of it, is within 5%
of the same step timed in a fresh child process with nothing else loaded, their rounds interleaved
(lab.experiments.sentinel's child, warmed up by the sentinel's rule with its defaults:
lab.measure.timing.warm_until_steady, and taken again while its kept rounds still improve). This is the measurement the profiler's residue
spoiled on an H200 (+27-35% per eager step after one profiler session) before
lab.measure.profiler_guard.

    python -m pytest -q -p no:cacheprovider tests/e2e/test_gpu_integrity.py
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import pytest

from lab.contract import hostspeed
from lab.contract import notes as N
from lab.contract.names import Method
from lab.contract.profiles import GPT2
from lab.experiments import sentinel
from lab.experiments.common.paired import Paired, alternate, ask_round
from lab.host import cpuplace
from lab.run import runner, turns
from lab.step.model import resolve_weights

pytestmark = [pytest.mark.cuda, pytest.mark.cuda_e2e]
STEPS, ROUNDS = 64, 5
PAIRS, PAIR_STEPS = sentinel.Options().pairs, sentinel.Options().pair_steps  # as the sentinels pair


def _kwargs(device: str, methods: list[str], profile_then_time: bool, model: dict | None = None) -> dict:
    """The sentinel child's arguments: its warm-up rule with the sentinel's own defaults (lab.experiments.sentinel),
    `ROUNDS` kept rounds of `STEPS` steps."""
    return {"model": model or dataclasses.asdict(GPT2), "provenance": resolve_weights(GPT2, "random"),
            "device": device, "prompt_len": 16, "max_len": 256, "steps": STEPS, "methods": methods,
            "profile_then_time": profile_then_time, "pair_steps": PAIR_STEPS, **(sentinel.rule(sentinel.Options()) | {"rounds": ROUNDS})}


def paired_after_profile(device: str, methods: list[str], model: dict | None = None) -> tuple[Paired, dict, dict]:
    """Three sentinel children alive side by side (lab.run.turns): one profiles its methods once, then all answer
    eager rounds in rotating cycles on one CPU, as sentinel_end takes turns between the run's own eager and two
    fresh processes'. A host whose speed moves between turns moves every side of a cycle alike; the two fresh
    processes' own ratio is the resolution."""
    limit = sentinel.Options().timeout_s + 60
    with turns.Turns(sentinel.CHILD, _kwargs(device, methods, True, model), timeout_s=limit) as profiled, \
            turns.Turns(sentinel.CHILD, _kwargs(device, methods, False, model), timeout_s=limit) as fresh, \
            turns.Turns(sentinel.CHILD, _kwargs(device, methods, False, model), timeout_s=limit) as twin:
        after_profile, clean, _ = profiled.wait()["ready"], fresh.wait()["ready"], twin.wait()["ready"]
        with cpuplace.pinned(cpuplace.thread_cpu()) as cpu:  # every child on one CPU, as sentinel_end pins them
            for child in (profiled, fresh, twin) if cpu is not None else ():
                child.ask({"pin": cpu})
            paired = alternate(lambda: ask_round(profiled)["samples"],
                               {"fresh": lambda: ask_round(fresh), "fresh-2": lambda: ask_round(twin)}, PAIRS)
    return paired, after_profile, clean


def _median(rounds: list[list[float]]) -> float:
    return statistics.median([x for r in rounds for x in r])


def test_eager_after_its_kernel_profile_is_within_5_percent_of_interleaved_fresh_processes():
    """A process that profiled eager as cuda_graph_decode does, judged by rounds taking turns with two fresh
    processes': the paired ratio within 5% or its interval holding 1 (lab.contract.hostspeed.in_run_clean). It
    compared two processes run one after the other at first, which an H200 host whose speed moved 2x failed
    (2026-12-02: 2.745 ms after the profile, 4.249 ms in the fresh process started next); then one fresh process
    taking turns on one CPU: 1.080 [1.011, 1.120], within the few percent two fresh processes differ by."""
    paired, profiled, fresh = paired_after_profile("cuda", [Method.EAGER])
    ratio, ci = paired.ratio()
    before = _median(profiled["rounds"][Method.EAGER])
    after = _median(profiled["after_profile"][Method.EAGER])
    assert hostspeed.in_run_clean(ratio, ci), (ratio, ci, paired.resolution(), before, after, profiled["warmup"],
                                               fresh["warmup"])


def test_the_sentinel_experiments_run_and_judge(tmp_path: Path):
    from test_gpu_experiments import cuda_tiny

    res = runner.run(cuda_tiny(), tmp_path, only=["sentinel", "cuda_graph_decode", "sentinel_end"])
    start, end = res.record("sentinel"), res.record("sentinel_end")
    assert start.status == "OK" and end.status == "OK", (start.reason, end.reason)
    assert {m.params["method"] for m in start.metrics if m.name == "sentinel_step_ms"} == set(sentinel.METHODS)
    assert {m.name for m in end.metrics} >= {"sentinel_drift", "in_run_over_sentinel", "sentinel_step_ms",
                                            "in_run_over_fresh", "in_run_over_fresh_ci_low", "in_run_over_fresh_ci_high",
                                            "in_run_change", "in_run_change_ci_low", "in_run_change_ci_high"}
    assert {m.name for m in start.metrics} >= {"in_run_over_fresh", "fresh_over_fresh"}  # the same two, at the start
    assert [c.name for c in end.checks if "where it started" in c.name]  # judged against the run's start
    assert "host_index.paired" in end.notes and end.notes[N.WARMUP.key_for(when="end")]["index_ms"]
    assert not [c for c in start.checks + end.checks if not c.passed and "moved" in c.name]  # the host's, not a check
    assert N.WARMUP.key_for(when="start") in start.notes and N.WARMUP.key_for(when="end") in end.notes
    assert [c.name for c in start.checks if "steady" in c.name] == ["the sentinel's rounds were steady (start)"]
    assert res.manifest["host_dispatch"]["launch_us_per_op"] > 0
