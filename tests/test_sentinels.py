"""report.sections.instrument: the run's own step beside the fresh-process sentinel, and the host's dispatch facts."""

from __future__ import annotations

from report.sections import instrument
from report.draw.tables import fmt
from synthetic_runs import check, decode, metric, rec, results

SP = {"n": 5, "median": 3.3, "q1": 3.2, "q3": 3.4, "min": 3.1, "max": 3.6, "rel_iqr": 0.06, "noisy": False,
      "ci_low": 3.25, "ci_high": 3.36}
DISPATCH = {"cpu_model": "Xeon 8480", "cpu_mhz": 2100.0, "load_start": [0.4, 0.3, 0.2], "load_end": [1.1, 0.7, 0.4],
            "launch_us_per_op": 4.12, "placement": {"bind": "node", "allowed": [8, 9, 10, 11, 14],
                                                    "numa_nodes": {"0": [0, 1, 2, 3, 4, 5, 6, 7],
                                                                   "1": [8, 9, 10, 11, 12, 13, 14, 15]},
                                                    "gpu_node": 1, "ran_on": 9}}


def _run(passed: bool):
    p = {"method": "eager", "batch": 1, "dtype": "float32"}
    start = rec("sentinel", [metric("sentinel_step_ms", 3.3, "ms", SP, when="start", **p)])
    end = rec("sentinel_end", [metric("sentinel_step_ms", 3.36, "ms", when="end", **p),
                               metric("in_run_over_sentinel", 1.182, "x", method="eager"),
                               metric("sentinel_drift", 1.018, "x", method="eager")],
              checks=[check("in-run eager within 10% of the fresh-process sentinel", passed,
                            "cuda_graph_decode 3.9 ms against the sentinel's 3.3 ms (1.182x)", method="eager"),
                      check("the fresh-process eager step moved less than 10% over the run", True, method="eager")])
    return results(start, decode({"eager": 3.9, "graph": 0.7}), end, manifest={"host_dispatch": DISPATCH})


def test_in_run_eager_beside_the_sentinel() -> None:
    section = instrument.instrument(_run(False))
    table = next(t for t in section.tables if t.id == "sentinel-table")
    row = [c.text for c in table.rows[0]]
    assert row == ["eager", fmt(3.3, "ms"), fmt(3.9, "ms"), fmt(3.36, "ms"), fmt(1.182, "x"), fmt(1.018, "x"), "—", "—"]
    assert "95% [3.25, 3.36]" in table.rows[0][1].sub
    assert "bad" in table.rows[0][4].cls and "bad" not in table.rows[0][5].cls
    assert "1.182x" in section.intro


def test_the_paired_verdict_with_its_interval_and_the_hosts_warnings() -> None:
    """A run of this lab version: the paired in-run/fresh ratio is the verdict; the drift is data and a host warning."""
    p = {"method": "eager", "batch": 1, "dtype": "float32"}
    paired = "in-run eager within 5% of an interleaved fresh process (or its interval holds 1)"
    end = rec("sentinel_end", [metric("sentinel_step_ms", 4.9, "ms", when="end", **p),
                               metric("sentinel_drift", 1.48, "x", method="eager"),
                               metric("in_run_over_fresh", 1.012, "x", **p),
                               metric("in_run_over_fresh_ci_low", 0.991, "x", **p),
                               metric("in_run_over_fresh_ci_high", 1.031, "x", **p)],
              checks=[check(paired, True, "8 paired rounds", **p)],
              notes={"host_warnings": ["the fresh-process eager step moved 1.48x over the run"]})
    start = rec("sentinel", [metric("sentinel_step_ms", 3.3, "ms", SP, when="start", **p)])
    section = instrument.instrument(results(start, decode({"eager": 3.9, "graph": 0.7}), end))
    table = next(t for t in section.tables if t.id == "sentinel-table")
    drift, verdict = table.rows[0][5], table.rows[0][6]
    assert verdict.text == fmt(1.012, "x") and "bad" not in verdict.cls
    assert verdict.sub == f"95% [0.991, 1.03] · pass: {paired}"
    assert drift.text == fmt(1.48, "x") and "bad" not in drift.cls and not drift.sub  # data, not a check
    assert "Host warning: the fresh-process eager step moved 1.48x over the run." in section.intro


def test_the_change_over_the_run_against_the_same_processes_is_the_verdict_beside_both_ends() -> None:
    """A run whose process was 6% slower than its fresh processes already at the start, and 7% at the end: the paired
    cell shows the end with the start beneath it, the change cell the verdict (1.01x, passed)."""
    p = {"method": "eager", "batch": 1, "dtype": "float32"}
    moved = "in-run eager within 5% of where it started, against the same fresh processes (or its interval holds 1)"
    start = rec("sentinel", [metric("sentinel_step_ms", 3.3, "ms", SP, when="start", **p),
                             metric("in_run_over_fresh", 1.06, "x", **p),
                             metric("in_run_over_fresh_ci_low", 1.05, "x", **p),
                             metric("in_run_over_fresh_ci_high", 1.07, "x", **p)])
    end = rec("sentinel_end", [metric("sentinel_step_ms", 3.3, "ms", when="end", **p),
                               metric("in_run_over_fresh", 1.07, "x", **p),
                               metric("in_run_over_fresh_ci_low", 1.06, "x", **p),
                               metric("in_run_over_fresh_ci_high", 1.08, "x", **p),
                               metric("in_run_change", 1.0094, "x", **p),
                               metric("in_run_change_ci_low", 0.995, "x", **p),
                               metric("in_run_change_ci_high", 1.024, "x", **p)],
              checks=[check(moved, True, "1.009x over the run", **p)])
    table = next(t for t in instrument.instrument(results(start, decode({"eager": 3.9}), end)).tables
                 if t.id == "sentinel-table")
    paired, change = table.rows[0][6], table.rows[0][7]
    assert paired.text == fmt(1.07, "x") and paired.sub == "95% [1.06, 1.08]; at the start 1.06 x (95% [1.05, 1.07])"
    assert change.text == fmt(1.0094, "x") and change.sub == f"95% [0.995, 1.02] · pass: {moved}"
    assert "bad" not in change.cls


def test_the_flag_lists_only_failed_sentinel_checks() -> None:
    assert instrument.flags(_run(True)) == []
    assert instrument.flags(_run(False)) == ["in-run eager within 10% of the fresh-process sentinel: failed "
                                            "(cuda_graph_decode 3.9 ms against the sentinel's 3.3 ms (1.182x))"]


def test_the_hosts_dispatch_facts() -> None:
    table = instrument.dispatch_table(_run(True))
    kv = {r[0].text: r[1].text for r in table.rows}
    assert kv["CPU"] == "Xeon 8480" and kv["CPU clock"] == "2,100 MHz" and kv["host load at the end"] == "[1.1, 0.7, 0.4]"
    assert kv["one eager launch, fresh process (µs per op)"] == fmt(4.12, "us")
    assert kv["where the run ran (LAB_CPU_BIND)"] == "bind node; CPUs 8-11, 14; 2 NUMA node(s), the GPU on node 1"


def test_a_run_without_sentinel_or_dispatch_has_no_section() -> None:
    assert instrument.instrument(results(decode({"eager": 3.9, "graph": 0.7}))) is None
