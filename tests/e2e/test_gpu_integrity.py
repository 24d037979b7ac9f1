"""On CUDA: the profiler leaves no residue on the lab's timings, and the sentinel runs.

The eager GPT-2 124M step at batch 1, timed in this process after a kernel profile of it, is within 5%
of the same step timed in a fresh child process with nothing else loaded (lab.experiments.sentinel's
child, warmed up by the sentinel's rule with its defaults: lab.measure.timing.warm_until_steady, and
taken again while its kept rounds still improve). This is the measurement the profiler's residue
spoiled on an H200 (+27-35% per eager step after one profiler session) before
lab.measure.profiler_guard.

    python -m pytest -q -p no:cacheprovider tests/e2e/test_gpu_integrity.py
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import pytest

from lab.contract import notes as N
from lab.contract.names import Method
from lab.contract.profiles import GPT2
from lab.experiments import sentinel
from lab.run import runner
from lab.run.childproc import run_child
from lab.step.model import resolve_weights

pytestmark = [pytest.mark.cuda, pytest.mark.cuda_e2e]
STEPS, ROUNDS, TOLERANCE = 64, 5, 0.05


def _child(profile_then_time: bool) -> dict:
    """The sentinel's child: its warm-up rule and drift test with the sentinel's own defaults (lab.experiments.sentinel),
    `ROUNDS` kept rounds of `STEPS` steps."""
    rule = sentinel.rule(sentinel.Options()) | {"rounds": ROUNDS}
    res = run_child("lab.experiments.sentinel:child",
                    {"model": dataclasses.asdict(GPT2), "provenance": resolve_weights(GPT2, "random"), "device": "cuda",
                     "prompt_len": 16, "max_len": 256, "steps": STEPS, "methods": [Method.EAGER],
                     "profile_then_time": profile_then_time, **rule}, timeout_s=sentinel.Options().timeout_s + 60)
    assert res.ok, res.describe() + res.stderr_tail
    return res.value


def _median(rounds: list[list[float]]) -> float:
    return statistics.median([x for r in rounds for x in r])


def test_eager_after_its_kernel_profile_is_within_5_percent_of_a_fresh_process():
    """A run's process (a fresh one: pytest's own has run every other CUDA test) times eager, profiles it as
    cuda_graph_decode does, times it again; a second fresh process times it without any profile."""
    profiled = _child(profile_then_time=True)
    fresh = _child(profile_then_time=False)
    after = _median(profiled["after_profile"][Method.EAGER])
    before = _median(profiled["rounds"][Method.EAGER])
    clean = _median(fresh["rounds"][Method.EAGER])
    warm = {"profiled": profiled["warmup"], "fresh": fresh["warmup"]}  # rounds, seconds, retakes, round medians
    assert abs(after / clean - 1) <= TOLERANCE, (before, after, clean, warm)


def test_the_sentinel_experiments_run_and_judge(tmp_path: Path):
    from test_gpu_experiments import cuda_tiny

    res = runner.run(cuda_tiny(), tmp_path, only=["sentinel", "cuda_graph_decode", "sentinel_end"])
    start, end = res.record("sentinel"), res.record("sentinel_end")
    assert start.status == "OK" and end.status == "OK", (start.reason, end.reason)
    assert {m.params["method"] for m in start.metrics if m.name == "sentinel_step_ms"} == set(sentinel.METHODS)
    assert {m.name for m in end.metrics} >= {"sentinel_drift", "in_run_over_sentinel", "sentinel_step_ms",
                                            "in_run_over_fresh", "in_run_over_fresh_ci_low", "in_run_over_fresh_ci_high"}
    assert "host_index.paired" in end.notes and end.notes[N.WARMUP.key_for(when="end")]["index_ms"]
    assert not [c for c in start.checks + end.checks if not c.passed and "moved" in c.name]  # the host's, not a check
    assert N.WARMUP.key_for(when="start") in start.notes and N.WARMUP.key_for(when="end") in end.notes
    assert [c.name for c in start.checks if "steady" in c.name] == ["the sentinel's rounds were steady (start)"]
    assert res.manifest["host_dispatch"]["launch_us_per_op"] > 0
