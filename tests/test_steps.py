"""report.sections.steps: the fastest correct method by the stored verdict, its own MBU and bound, its interval, and the
decode step of a sweep run (model_scaling's 124M row)."""

from __future__ import annotations

from report.sections import steps
from report.sections.steps import cases, own_mbu, pct, step_rows
from synthetic_runs import STEP, decode, metric, rec, results


def best(res) -> str:
    return cases(step_rows(res))[0].best.method


def test_the_stored_correct_verdict_decides_the_fastest_correct_method() -> None:
    # fused agrees with eager only 9% free-running (tokens differ) but passes the teacher-forced rule: it is chosen;
    # graph's tokens are equal but its stored verdict is False: never chosen
    res = results(decode({"eager": 3.0, "graph": 0.6, "fused": 0.25, "compile+graph": 0.5},
                         correct={"eager": True, "graph": False, "fused": True, "compile+graph": True},
                         tokens={"graph": True, "fused": False, "compile+graph": True}))
    assert best(res) == "fused"
    res = results(decode({"eager": 3.0, "graph": 0.6, "fused": 0.25},
                         correct={"eager": True, "graph": True, "fused": False}, tokens={"fused": True}))
    assert best(res) == "graph"


def test_a_run_that_stored_no_verdict_is_judged_by_its_tokens() -> None:
    res = results(decode({"eager": 3.0, "graph": 0.6, "fused": 0.25}, tokens={"graph": True, "fused": False}))
    assert best(res) == "graph"


def test_mbu_is_the_methods_own_never_eagers() -> None:
    ceilings = rec("ceilings", [metric("mbu", 0.04, "fraction", method="eager", **STEP),
                                metric("binding", "launch", method="eager", **STEP)])
    res = results(decode({"eager": 3.0, "graph": 0.6}, correct={"eager": True, "graph": True},
                         mbu={"eager": 0.03, "graph": 0.17}), ceilings)
    c = cases(step_rows(res))[0]
    assert own_mbu(res, c.best).value == 0.17 and pct(own_mbu(res, c.best).value) == "17%"
    assert steps.ceiling(res, steps.M.BINDING, c.best) is None  # ceilings bounded eager only: no bound shown
    # no mbu of its own in either experiment: none, not eager's
    res = results(decode({"eager": 3.0, "graph": 0.6}, correct={"eager": True, "graph": True}), ceilings)
    assert own_mbu(res, cases(step_rows(res))[0].best) is None
    # ceilings' row for the method itself, where cuda_graph_decode stored none and ceilings measured that same step
    ceilings["metrics"] += [metric("mbu", 0.2, "fraction", method="graph", **STEP),
                            metric("measured_ms", 0.6, "ms", method="graph", **STEP)]
    res = results(decode({"eager": 3.0, "graph": 0.6}, correct={"eager": True, "graph": True}), ceilings)
    assert own_mbu(res, cases(step_rows(res))[0].best).value == 0.2
    # ceilings measured another step time (its own timing): its MBU is not shown beside this one
    res = results(decode({"eager": 3.0, "graph": 0.65}, correct={"eager": True, "graph": True}), ceilings)
    assert own_mbu(res, cases(step_rows(res))[0].best) is None


def test_a_stale_mbu_of_a_run_older_than_the_one_definition_is_never_shown() -> None:
    """Before issue 28 both experiments stored an MBU for cuda_graph_decode's step, cuda_graph_decode's counting all
    max_len cache slots (stale): ceilings' for that same step (the attended slots) is the one shown, on every page."""
    ceilings = rec("ceilings", [metric("mbu", 0.2, "fraction", method="graph", **STEP),
                                metric("measured_ms", 0.6, "ms", method="graph", **STEP)])
    res = results(decode({"eager": 3.0, "graph": 0.6}, correct={"eager": True, "graph": True}, mbu={"graph": 0.21}),
                  ceilings)
    assert own_mbu(res, cases(step_rows(res))[0].best).value == 0.2
    assert steps.stored_mbu(res.experiments, "graph", 1, "float32", 0.6).value == 0.2
    # ceilings bounded another step of graph (its own timing, older lab versions): the method's own is shown
    ceilings["metrics"][1]["value"] = 0.62
    res = results(decode({"eager": 3.0, "graph": 0.6}, correct={"eager": True, "graph": True}, mbu={"graph": 0.21}),
                  ceilings)
    assert [steps.stored_mbu(res.experiments, "graph", 1, "float32", t).value for t in (0.6, 0.62)] == [0.21, 0.21]


def test_the_speedup_is_printed_with_its_stored_interval() -> None:
    res = results(decode({"eager": 3.0, "graph": 0.6}, correct={"eager": True, "graph": True},
                         ci={"graph": (4.9, 5.12)}))
    row = cases(step_rows(res))[0].best
    assert row.speedup_text == "5× [4.9, 5.12]"
    assert "5× [4.9, 5.12]" in steps.steps(res).intro
    res = results(decode({"eager": 3.0, "graph": 0.6}, correct={"eager": True, "graph": True}))
    assert cases(step_rows(res))[0].best.speedup_text == "5×"


def test_method_table_cells_are_marked_by_the_interval_rule() -> None:
    res = results(decode({"eager": 3.0, "graph": 0.6, "compile-default": 2.9},
                         correct={"eager": True, "graph": True, "compile-default": True},
                         ci={"graph": (4.9, 5.1), "compile-default": (0.98, 1.09)}))
    table = next(t for t in steps.steps(res).tables if t.caption.startswith("Median ms per decode step"))
    cls = {r[0].text: r[1].cls for r in table.rows}
    assert "good" in cls["graph"]
    assert "good" not in cls["compile-default"] and "bad" not in cls["compile-default"]  # 1.03x, interval holds 1


def test_a_sweep_runs_decode_step_is_model_scalings_124M_row() -> None:
    p = {"size": "gpt2-124M", "batch": 1, "dtype": "float32"}
    ms = [metric("step_ms", 6.27, "ms", method="eager", **p), metric("step_ms", 0.518, "ms", method="compile+graph", **p),
          metric("step_ms", 0.40, "ms", method="compile+graph", **(p | {"size": "gpt2-355M"})),
          metric("speedup_vs_eager", 12.1, "x", method="compile+graph", **p),
          metric("tokens_equal", True, method="compile+graph", **p), metric("mbu", 0.2322, "fraction",
                                                                             method="compile+graph", **p)]
    res = results(rec("model_scaling", ms), profile="gpu-sweep")
    c = cases(step_rows(res))[0]
    assert (c.best.method, c.best.step.value, c.eager.step.value) == ("compile+graph", 0.518, 6.27)
    assert own_mbu(res, c.best).value == 0.2322
    section = steps.steps(res)
    assert section.minor and "model_scaling" in section.intro  # after the sweeps on the page


def test_older_labels_get_one_name() -> None:
    ind = rec("inductor", [metric("step_ms", 9.0, "ms", method="eager-indexed", step="indexed"),
                           metric("step_ms", 6.0, "ms", method="compiled-indexed", step="indexed"),
                           metric("speedup_vs_eager", 1.5, "x", method="compiled-indexed", step="indexed")])
    old = cases(step_rows(results(ind, profile="cpu")))[0]
    ind["metrics"] = [dict(m, params=dict(m["params"], method=m["params"]["method"].split("-")[0].replace(
        "compiled", "compile-default"))) for m in ind["metrics"]]
    new = cases(step_rows(results(ind, profile="cpu")))[0]
    assert old.best.label == new.best.label == "compile-default (indexed step)"


def test_a_run_with_ceilings_but_no_decode_experiment_shows_ceilings_own_steps() -> None:
    # a fleet's quick subset (ceilings without cuda_graph_decode or inductor): the section is the ceilings table,
    # placed after the others, and rendering it must not fail for want of a decode row
    ceilings = rec("ceilings", [metric("step_ms", 3.1, "ms", method="eager", **STEP)])
    section = steps.steps(results(ceilings))
    assert [t.caption.split(" (")[0] for t in section.tables] == [
        "The eager decode step timed by ceilings at every batch of the profile"]
    assert section.minor and section.tables[0].rows[0][0].text == "eager"
