"""report.sections.host: one sentence per run on what the host's CPU speed did (from the H200 rounds of 2026-12-02), and
the flags a run raised about itself, beside its headline on the front page and in `lab headline`."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from lab.contract import hostspeed as stats
from lab.contract.results import from_dict
from report.sections import host
from report.pages import headline
from report import render_site
from report_helpers import texts
from synthetic_runs import STEP, check, decode, metric, raw, rec, write_run

H200 = Path(__file__).parent / "fixtures" / "hostspeed_h200_rounds.csv"
PAIRED = "in-run eager within 5% of an interleaved fresh process (or its interval holds 1)"


def _h200_decode() -> dict:
    """cuda_graph_decode at B=1 fp32 as the lab records it, its rounds and index from the H200 rounds."""
    with H200.open() as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    loop = [float(r["loop"]) for r in rows]
    d = decode({"eager": 3.89, "graph": 0.697}, correct={"eager": True, "graph": True})
    for method in ("eager", "graph"):
        times = [float(r[method]) for r in rows]
        est = stats.sensitivity(loop, times)
        assert est is not None and est.interval is not None
        p = {"method": method, "readback": False, **STEP}
        d["metrics"] += [metric("host_index_ms", loop, "ms", **p), metric("host_sensitivity", est.value, "x", **p),
                         metric("host_sensitivity_ci_low", est.interval.low, "x", **p),
                         metric("host_sensitivity_ci_high", est.interval.high, "x", **p)]
    return d


def _flagged_end() -> dict:
    warm = {"rounds": 60, "seconds": 25.1, "retakes": 0, "warmup_steady": False, "warmup_medians_ms": [3.0, 6.4],
            "round_medians_ms": {"eager": [3.1, 6.0]}, "drifting": [], "budget_s": 25.0, "out_of_budget": True,
            "host_moved": 1.9}
    return rec("sentinel_end", [metric("in_run_over_fresh", 1.12, "x", method="eager", **STEP)],
               checks=[check(PAIRED, False, "8 paired rounds: ratio 1.120x [1.08, 1.16]", method="eager", **STEP)],
               notes={"warmup.end": warm, "host_warnings": ["the fresh process (end) did not settle: ...",
                                                             "the fresh-process eager step moved 1.65x over the run"]})


def test_the_sentence_says_how_far_the_host_moved_and_who_followed_it() -> None:
    text = host.sentence(from_dict(raw(_h200_decode()), "x/results.json").experiments)
    assert text.startswith("the host's CPU speed varied 1.9× (p5–p95) during this run; ")
    assert "eager (0.90 [0.84, 0.96]) followed it" in text and "graph (0.00 [0.00, 0.00]) did not" in text


def test_where_the_timing_cannot_tell_the_fresh_process_s_tens_of_rounds_answer_for_eager_and_graph() -> None:
    """A calm minute's 5 rounds leave eager's elasticity anywhere ([-7.0, 4.7] on the H200); the sentinel's warm-up
    and kept rounds, while the host moved, tell it: the sentence takes the narrower interval, and says where from."""
    d = decode({"eager": 2.8, "graph": 0.7}, correct={"eager": True, "graph": True})
    for method, est in (("eager", (0.47, -7.0, 4.7)), ("graph", (0.0005, -0.02, 0.01))):
        p = {"method": method, "readback": False, **STEP}
        d["metrics"] += [metric("host_index_ms", [0.44, 0.46, 0.45], "ms", **p)] + [
            metric(name, v, "x", **p) for name, v in zip(("host_sensitivity", "host_sensitivity_ci_low",
                                                          "host_sensitivity_ci_high"), est)]
    fresh = {"method": "eager", "batch": 1, "dtype": "float32", "when": "start"}
    sentinel = rec("sentinel", [metric(name, v, "x", **fresh) for name, v in
                                zip(("host_sensitivity", "host_sensitivity_ci_low", "host_sensitivity_ci_high"),
                                    (0.76, 0.54, 0.99))])
    text = host.sentence(from_dict(raw(d, sentinel), "x/results.json").experiments)
    assert "eager, fresh process (0.76 [0.54, 0.99]) followed it" in text
    assert "graph (0.00 [-0.02, 0.01]) did not" in text  # the timing's own interval was the narrower


def test_a_sweep_names_each_method_once() -> None:
    """model_scaling times every method at four sizes: the sentence speaks for its first case, once per method (the
    committed H200 sweep once listed eager's fresh-process figure three times)."""
    from lab.contract.results import load

    sweep = Path(__file__).parents[1] / "manifests" / "reference" / "h200-2026-12-02-sweep" / "results.json"
    text = host.sentence(load(sweep).experiments)
    assert text.count("eager, fresh process") == 1 and text.count("graph, fresh process") == 1, text
    assert text.count("compile+graph") == 1 and text.count("fused-pdl-prefetch") == 1, text


def test_a_run_without_the_index_says_so() -> None:
    assert host.sentence(from_dict(raw(decode({"eager": 3.0})), "x/results.json").experiments) == \
        host.NO_INDEX


def test_the_flags_name_the_overloaded_host_the_unsteady_warm_up_and_the_unclean_instrument() -> None:
    r = from_dict(raw(_flagged_end(), manifest={"host": {"overloaded": True, "load_start": [14.2, 9.0, 5.0]}}),
                  "x/results.json")
    flags = host.flags(r.experiments, r.manifest)
    assert flags == ["host overloaded at the start (load 14.2)",
                     "unsteady warm-up (end): the 25.0 s budget ran out; the host index moved 1.90×",
                     f"instrument not clean: {PAIRED} (8 paired rounds: ratio 1.120x [1.08, 1.16])",
                     "host: the fresh-process eager step moved 1.65x over the run"]
    calm = from_dict(raw(_h200_decode(), manifest={"host": {"overloaded": False}}), "x/results.json")
    assert host.flags(calm.experiments, calm.manifest) == []
    excused = rec("gemm_bound", [], notes={"host_warnings": ["gemm_bound's speedup 0.75x ...: the host moved"]})
    cpu = from_dict(raw(excused, manifest={"host": {"overloaded": False}}, profile="cpu"), "x/results.json")
    assert host.flags(cpu.experiments, cpu.manifest) == ["host (gemm_bound): gemm_bound's speedup 0.75x ...: the host "
                                                         "moved"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("runs")
    write_run(root / "flagged", _h200_decode(), _flagged_end(), manifest={"host": {"overloaded": True}})
    write_run(root / "older", decode({"eager": 3.0, "graph": 0.7}, correct={"graph": True}))
    return root, render_site([root], tmp_path_factory.mktemp("site")).index.read_text()


def _row(html: str, run: str) -> str:
    start = html.index(f'data-run="{run}"')
    return html[start:html.index("</tr>", start)]


def test_the_front_page_carries_the_sentence_and_the_flags_beside_the_headline(site: tuple[Path, str]) -> None:
    _, html = site
    row = _row(html, "flagged")
    cases = row[row.index('class="cases"'):]
    assert "followed it" in texts(cases, "host-state")[0]
    assert texts(cases, "run-flag")[0] == "⚑ host overloaded at the start"
    assert any("instrument not clean" in t for t in texts(cases, "run-flag"))
    assert texts(_row(html, "older"), "host-state") == [host.NO_INDEX]


def test_lab_headline_carries_them_too(site: tuple[Path, str]) -> None:
    root, _ = site
    text = headline.render([root / "flagged"])
    assert "\nHost: the host's CPU speed varied 1.9× (p5–p95) during this run; " in text
    assert "⚑ host overloaded at the start  \n" in text and f"⚑ instrument not clean: {PAIRED}" in text
    assert "\nHost: " + host.NO_INDEX + ".\n" in headline.render([root / "older"])


def test_the_run_page_section_sets_each_method_against_the_index() -> None:
    d = _h200_decode()
    p = {"method": "graph", "readback": False, **STEP}
    d["metrics"] += [metric("speedup_at_reference", 4.58, "x", **p), metric("speedup_at_reference_ci_low", 4.51, "x", **p),
                     metric("speedup_at_reference_ci_high", 4.65, "x", **p),
                     metric("host_index_cost", 0.021, "fraction", **STEP)]
    sec = host.section(from_dict(raw(d), "x/results.json"))
    assert sec is not None and sec.intro.startswith("The host's CPU speed varied 1.9× (p5–p95) during this run; ")
    assert "cuda_graph_decode batch=1, dtype=float32: 2.1%" in sec.intro
    [table] = sec.tables
    rows = {r[1].text: [c.text for c in r] for r in table.rows}
    assert rows["eager"][3] == "0.902× [0.844, 0.956]" and rows["graph"][3] == "3.44e-04× [5.08e-05, 6.60e-04]"
    assert rows["graph"][7] == "4.58× [4.51, 4.65]" and rows["eager"][7] == "—"
    assert host.section(from_dict(raw(decode({"eager": 3.0})), "x/results.json")) is None


def test_the_sentence_names_the_other_methods_and_gives_figures_for_eager_and_graph_replay() -> None:
    d = _h200_decode()
    p = {"method": "fused", "readback": False, **STEP}
    d["metrics"] += [metric("host_index_ms", [1.0, 1.5, 2.0], "ms", **p), metric("host_sensitivity", 0.01, "x", **p),
                     metric("host_sensitivity_ci_low", 0.0, "x", **p), metric("host_sensitivity_ci_high", 0.02, "x", **p)]
    text = host.sentence(from_dict(raw(d), "x/results.json").experiments)
    assert "graph (0.00 [0.00, 0.00]), fused did not" in text
