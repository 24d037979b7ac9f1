"""`lab compare`'s "what memory speed bought" (report.pages.bandwidth_split): where two runs measured copy rates apart,
each step both ran is put on the line through its two points (the bytes' time at the run's copy rate, the step).

Synthetic runs built from a known line (a = 0.1 ms, c = 0.6) first: the split recovers it whichever side is the
slower; then what has no split (rates within 15%, a run without a copy rate, bytes that differ or are missing);
then `lab compare` on the committed H100 and H200 model_scaling references, as text, JSON and the report's page.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lab.__main__ import main as lab_main
from lab.contract import metrics as M
from lab.contract.results import Metric, Record, Results, RunInfo, Spread
from lab.run.manifest import REPO_ROOT
from report.pages.bandwidth_split import MIN_BANDWIDTH_RATIO, SplitRow, bandwidth_split
from report.pages.compare import Side, compare
from report.pages.compare_text import format_text, to_json

REFERENCE = REPO_ROOT / "manifests" / "reference"
H100 = REFERENCE / "h100-2026-12-06-model-scaling"  # copies at 3,012 GB/s
H200 = REFERENCE / "h200-2026-12-06-model-scaling"  # copies at 4,254 GB/s
REL = 1e-9  # the tolerance of figures the split computes from exact inputs (a few roundings of float arithmetic)

A_MS, C = 0.1, 0.6  # the line the synthetic steps are built from: T = A_MS + C * x
NBYTES = 1e9
CI = 0.002  # half the width of each synthetic step's 95% interval (ms)
CASE = {"size": "gpt2-124M", "dtype": "bfloat16", "batch": 1}


def floor_ms(gbps: float, nbytes: float = NBYTES) -> float:
    return nbytes / (gbps * 1e9) * 1e3


def on_line(gbps: float) -> float:
    return A_MS + C * floor_ms(gbps)


def step(value: float, method: str = "fused", ci: float | None = CI, **params: object) -> Metric:
    spread = None if ci is None else Spread(n=30, median=value, q1=value - ci, q3=value + ci, min=value - 2 * ci,
                                            max=value + 2 * ci, rel_iqr=2 * ci / value, noisy=False,
                                            ci_low=value - ci, ci_high=value + ci)
    return Metric(M.STEP_MS.name, value, M.STEP_MS.unit, CASE | {"method": method} | params, spread)


def nbytes(value: float = NBYTES, **params: object) -> Metric:
    return Metric(M.BYTES_PER_STEP.name, value, M.BYTES_PER_STEP.unit, CASE | params)


def copy_rate(gbps: float) -> Metric:
    return Metric(M.BANDWIDTH_GBPS.name, gbps, M.BANDWIDTH_GBPS.unit, {"kind": "copy", "source": "measured here"})


def run(*metrics: Metric, experiment: str = "model_scaling") -> Results:
    return Results(run=RunInfo(profile="gpu", started_at="2026-12-06T09:00:00+00:00"), manifest={"manifest_version": 1},
                   experiments=[Record(experiment, experiment, "OK", metrics=list(metrics))])


def on_the_line(gbps: float, *extra: Metric) -> Results:
    """A run at copy rate `gbps` whose one step lies on the line (A_MS, C)."""
    return run(copy_rate(gbps), nbytes(), step(on_line(gbps)), *extra)


def side(results: Results, name: str) -> Side:
    return Side(Path(name) / "results.json", results.manifest, results, name=name)


# ---------------------------------------------------------------------------- the line

def test_the_split_recovers_the_line_its_steps_were_built_from() -> None:
    split = bandwidth_split(on_the_line(3000), on_the_line(4500))
    [row] = split.rows
    assert (row.experiment, row.params, row.slower) == ("model_scaling", CASE | {"method": "fused"}, "A")
    assert (row.slow_GBps, row.fast_GBps, row.bytes) == (3000, 4500, NBYTES)
    assert row.exposed == pytest.approx(C, rel=REL) and row.intercept_us == pytest.approx(A_MS * 1000, rel=REL)
    assert row.floor_slow_us == pytest.approx(NBYTES / 3000e9 * 1e6, rel=REL)  # 1 GB at 3,000 GB/s: 333.3 µs
    assert row.floor_fast_us == pytest.approx(NBYTES / 4500e9 * 1e6, rel=REL)
    assert (row.step_slow_ms, row.step_fast_ms) == (on_line(3000), on_line(4500))
    assert row.line_ms(row.floor_fast_us) == pytest.approx(row.step_fast_ms, rel=REL)  # T_f, exactly the line's
    assert row.line_ms(row.floor_slow_us) == pytest.approx(row.step_slow_ms, rel=REL)
    assert row.consistent


def test_the_intervals_take_the_two_steps_intervals_as_a_box_and_hold_the_line() -> None:
    [row] = bandwidth_split(on_the_line(3000), on_the_line(4500)).rows
    x_s, x_f = floor_ms(3000), floor_ms(4500)
    t_s, t_f, delta = on_line(3000), on_line(4500), x_s - x_f
    assert (row.exposed_low, row.exposed_high) == (pytest.approx((t_s - CI - (t_f + CI)) / delta, rel=REL),
                                                   pytest.approx((t_s + CI - (t_f - CI)) / delta, rel=REL))
    assert (row.intercept_low_us, row.intercept_high_us) == (
        pytest.approx(((t_f - CI) * x_s - (t_s + CI) * x_f) / delta * 1000, rel=REL),
        pytest.approx(((t_f + CI) * x_s - (t_s - CI) * x_f) / delta * 1000, rel=REL))
    assert row.exposed_low is not None and row.exposed_high is not None
    assert row.intercept_low_us is not None and row.intercept_high_us is not None
    assert row.exposed_low < C < row.exposed_high
    assert row.intercept_low_us < A_MS * 1000 < row.intercept_high_us


def test_swapping_a_and_b_gives_the_same_row_slow_and_fast_by_bandwidth_not_by_side() -> None:
    slow, fast = on_the_line(3000), on_the_line(4500)
    [ab], [ba] = bandwidth_split(slow, fast).rows, bandwidth_split(fast, slow).rows
    assert (ab.slower, ba.slower) == ("A", "B")
    assert (ba.step_a_ms, ba.step_b_ms) == (ab.step_b_ms, ab.step_a_ms) == (on_line(4500), on_line(3000))
    numbers = [f for f in SplitRow.__dataclass_fields__ if f not in ("experiment", "params", "slower")]
    assert {f: getattr(ba, f) for f in numbers} == {f: pytest.approx(getattr(ab, f), rel=REL) for f in numbers}
    assert ba.exposed == pytest.approx(C, rel=REL) and ba.intercept_us == pytest.approx(A_MS * 1000, rel=REL)


def test_a_step_without_an_interval_has_none_and_is_still_split() -> None:
    a = run(copy_rate(3000), nbytes(), step(on_line(3000), ci=None))
    [row] = bandwidth_split(a, on_the_line(4500)).rows
    assert row.exposed == pytest.approx(C, rel=REL) and row.intercept_us == pytest.approx(A_MS * 1000, rel=REL)
    assert (row.exposed_low, row.exposed_high, row.intercept_low_us, row.intercept_high_us) == (None,) * 4
    assert "c 0.60  a 100 µs" in format_text(compare(side(a, "a"), side(on_the_line(4500), "b")))


def test_a_step_that_moved_by_more_than_its_bytes_time_says_so() -> None:
    """An eager step on a slower host: c far above 1 is no share, something besides memory speed differs."""
    slower_host = run(copy_rate(3000), nbytes(), step(on_line(3000) + 0.5))
    [row] = bandwidth_split(slower_host, on_the_line(4500)).rows
    assert row.exposed > 1 and not row.consistent
    assert "(c outside [0, 1]: more than memory speed differs)" in format_text(
        compare(side(slower_host, "a"), side(on_the_line(4500), "b")))


def test_an_eager_step_is_the_host_s_whatever_its_c() -> None:
    """Eager's step is bound by its host's dispatch, and the two runs' hosts differ too: even a c inside [0, 1] says
    nothing about memory, and the row says so; a kernel-bound step on the same line carries no caveat."""
    a = run(copy_rate(3000), nbytes(), step(on_line(3000), method="eager"), step(on_line(3000), method="graph"))
    b = run(copy_rate(4500), nbytes(), step(on_line(4500), method="eager"), step(on_line(4500), method="graph"))
    rows = {r.params["method"]: r for r in bandwidth_split(a, b).rows}
    assert rows["eager"].consistent and rows["eager"].dispatch and "host's dispatch" in rows["eager"].caveat
    assert not rows["graph"].dispatch and rows["graph"].caveat == ""
    text = format_text(compare(side(a, "a"), side(b, "b"))).split("What memory speed bought", 1)[1]
    [eager] = [line for line in text.splitlines() if "method=eager}" in line]
    assert eager.endswith("(bound by the host's dispatch: the hosts differ too, the line says nothing about memory)")
    [graph] = [line for line in text.splitlines() if "method=graph}" in line]
    assert "(" not in graph.split("µs", 1)[1]


# ---------------------------------------------------------------------------- no split

def test_rates_within_15_percent_give_no_rows_and_the_line_says_why() -> None:
    assert MIN_BANDWIDTH_RATIO == 1.15
    split = bandwidth_split(on_the_line(3000), on_the_line(3300))
    assert split and not split.rows
    [rates] = split.rates
    assert rates.absent == "the runs' copy rates differ by 10.0% (3,000 vs 3,300 GB/s): under 15%, no split"
    text = format_text(compare(side(on_the_line(3000), "a"), side(on_the_line(3300), "b")))
    assert "What memory speed bought: no split\n  model_scaling: the runs' copy rates differ by 10.0%" in text
    assert bandwidth_split(on_the_line(3000), on_the_line(3460)).rows  # 15.3% apart: split


def test_a_run_without_a_copy_rate_has_no_section() -> None:
    bare = run(nbytes(), step(on_line(4500)))
    other_kind = run(Metric(M.BANDWIDTH_GBPS.name, 4500, M.BANDWIDTH_GBPS.unit, {"kind": "read"}), nbytes(),
                     step(on_line(4500)))
    for b in (bare, other_kind):
        split = bandwidth_split(on_the_line(3000), b)
        assert not split and not split.rates and not split.rows
        c = compare(side(on_the_line(3000), "a"), side(b, "b"))
        assert "What memory speed bought" not in format_text(c)
        assert json.loads(to_json(c))["bandwidth_split"] == {"rates": [], "rows": []}


def test_an_experiment_in_one_run_only_has_no_section() -> None:
    elsewhere = run(copy_rate(4500), nbytes(), step(on_line(4500)), experiment="decode")
    assert not bandwidth_split(on_the_line(3000), elsewhere)


def test_a_step_whose_bytes_differ_or_are_missing_is_skipped() -> None:
    a = run(copy_rate(3000), nbytes(), nbytes(2 * NBYTES, size="gpt2-1.5B"), nbytes(size="gpt2-355M"),
            step(on_line(3000)), step(on_line(3000), size="gpt2-1.5B"), step(on_line(3000), size="gpt2-355M"),
            step(on_line(3000), size="gpt2-774M"))
    b = run(copy_rate(4500), nbytes(), nbytes(3 * NBYTES, size="gpt2-1.5B"),  # 1.5B: other bytes; 355M: none in B
            step(on_line(4500)), step(on_line(4500), size="gpt2-1.5B"), step(on_line(4500), size="gpt2-355M"),
            step(on_line(4500), size="gpt2-774M"))  # 774M: bytes in neither
    assert [row.params["size"] for row in bandwidth_split(a, b).rows] == ["gpt2-124M"]


def test_bytes_or_copy_rates_a_run_records_twice_with_other_values_are_no_answer() -> None:
    """Two bytes_per_step that both fit a step, or two copy rates, that disagree: which to take is not settled by
    taking the first (lab.contract.query does the same)."""
    twice = run(copy_rate(3000), nbytes(), Metric(M.BYTES_PER_STEP.name, 2 * NBYTES, M.BYTES_PER_STEP.unit, {}),
                step(on_line(3000)))
    split = bandwidth_split(twice, on_the_line(4500))
    assert split.rates and not split.rows
    same_twice = run(copy_rate(3000), nbytes(), Metric(M.BYTES_PER_STEP.name, NBYTES, M.BYTES_PER_STEP.unit, {}),
                     step(on_line(3000)))
    assert len(bandwidth_split(same_twice, on_the_line(4500)).rows) == 1
    two_rates = run(copy_rate(3000), Metric(M.BANDWIDTH_GBPS.name, 3100, M.BANDWIDTH_GBPS.unit, {"kind": "copy"}),
                    nbytes(), step(on_line(3000)))
    assert not bandwidth_split(two_rates, on_the_line(4500))


def test_a_step_only_one_run_has_is_skipped_and_rows_sort_by_params() -> None:
    a = on_the_line(3000, step(on_line(3000), method="graph", batch=64), nbytes(batch=64),
                    step(on_line(3000), method="eager", batch=8), nbytes(batch=8), step(on_line(3000), method="graph"))
    b = on_the_line(4500, step(on_line(4500), method="graph"), step(on_line(4500), method="eager", batch=8),
                    nbytes(batch=8), step(on_line(4500), method="graph", batch=64), nbytes(batch=64),
                    step(on_line(4500), method="eager", batch=16), nbytes(batch=16))  # batch 16: only B ran it
    assert [(r.params["batch"], r.params["method"]) for r in bandwidth_split(a, b).rows] == [
        (1, "fused"), (1, "graph"), (8, "eager"), (64, "graph")]


# ---------------------------------------------------------------------------- text, JSON and the page

def test_the_text_section_names_the_rates_and_each_step_through_safe() -> None:
    evil = "fused\x1b[2J"
    a = run(copy_rate(3000), nbytes(), step(on_line(3000), method=evil))
    b = run(copy_rate(4500), nbytes(), step(on_line(4500), method=evil))
    text = format_text(compare(side(a, "a"), side(b, "b")))
    section = text.split("What memory speed bought: ", 1)[1].splitlines()
    assert section[0] == "1 step split, each on the line through its two points"
    assert section[1] == "  model_scaling: A copies at 3,000 GB/s, B at 4,500 GB/s (B's memory 1.50x faster)"
    assert section[3] == ("  model_scaling{size=gpt2-124M,dtype=bfloat16,batch=1,method=fused\\x1b[2J}  "
                          "A  0.3000 ms  B  0.2333 ms  c 0.60 [0.56, 0.64]  a 100 µs [90, 110]")
    assert "\x1b" not in text


PREFETCH = {"size": "gpt2-124M", "dtype": "bfloat16", "batch": 1, "method": "fused-pdl-prefetch"}


def test_lab_compare_on_the_h100_and_h200_references_prints_the_split(capsys) -> None:
    """Hand-computed: fused-pdl-prefetch at gpt2-124M bf16 batch 1 steps 0.1728 and 0.1595 ms, floors about 82.9 and
    58.7 µs: c about 0.55, a about 127 µs."""
    assert lab_main(["compare", str(H100), str(H200)]) == 0
    out = capsys.readouterr().out
    section = out.split("\nWhat memory speed bought: ", 1)[1]
    assert section.startswith("40 steps split")
    assert "  model_scaling: A copies at 3,012 GB/s, B at 4,254 GB/s (B's memory 1.41x faster)\n" in section
    label = "model_scaling{" + ",".join(f"{k}={v}" for k, v in PREFETCH.items()) + "}"
    line = next(line for line in section.splitlines() if line.strip().startswith(label + " "))
    found = re.search(r"A +([\d.]+) ms +B +([\d.]+) ms +c ([\d.]+) \[([\d.]+), ([\d.]+)\] +a (\d+) µs \[(\d+), (\d+)\]",
                      line)
    assert found, line
    step_a, step_b, c, c_lo, c_hi, a, a_lo, a_hi = map(float, found.groups())
    assert (step_a, step_b) == (0.1728, 0.1595)
    assert 0.3 < c < 0.8 and c_lo <= c <= c_hi
    assert 100 < a < 150 and a_lo <= a <= a_hi


def test_lab_compare_json_holds_the_split_records(capsys) -> None:
    assert lab_main(["compare", str(H100), str(H200), "--json"]) == 0
    split = json.loads(capsys.readouterr().out)["bandwidth_split"]
    assert split["rates"] == [{"experiment": "model_scaling", "a_GBps": 3011.8, "b_GBps": 4254.4, "absent": "",
                               "ratio": pytest.approx(4254.4 / 3011.8, rel=REL), "slower": "A"}]
    assert len(split["rows"]) == 40 and all(r["experiment"] == "model_scaling" for r in split["rows"])
    row = next(r for r in split["rows"] if r["params"] == PREFETCH)
    assert 0.3 < row["exposed"] < 0.8 and 100 < row["intercept_us"] < 150
    assert row["exposed_low"] <= row["exposed"] <= row["exposed_high"]
    assert row["intercept_low_us"] <= row["intercept_us"] <= row["intercept_high_us"]
    assert (row["slower"], row["slow_GBps"], row["fast_GBps"]) == ("A", 3011.8, 4254.4)
    assert (row["step_a_ms"], row["step_b_ms"]) == (row["step_slow_ms"], row["step_fast_ms"])
    assert row["step_a_ms"] == pytest.approx(0.1728, abs=5e-5) and row["step_b_ms"] == pytest.approx(0.1595, abs=5e-5)
    assert row["bytes"] == 248506368  # the bytes_per_step of gpt2-124M bf16 batch 1, the same in both runs
    assert row["floor_slow_us"] == pytest.approx(248506368 / 3011.8e9 * 1e6, rel=REL)  # 82.5 µs
    assert row["floor_fast_us"] == pytest.approx(248506368 / 4254.4e9 * 1e6, rel=REL)  # 58.4 µs


def test_the_report_s_comparison_page_shows_the_split(tmp_path: Path) -> None:
    from report.site.build import render_site

    site = render_site([H100, H200], tmp_path / "site")
    assert site.compare is not None
    page = site.compare.read_text()
    assert page.count("<h3>What memory speed bought</h3>") == 2  # each run against the other
    assert "model_scaling: A copies at 3,012 GB/s, B at 4,254 GB/s" in page
    row = re.search(r"<tr><td>model_scaling</td><td>size=gpt2-124M, dtype=bfloat16, batch=1, method=fused-pdl-prefetch"
                    r"</td>(.*?)</tr>", page)
    assert row, "no fused-pdl-prefetch row"
    cells = re.findall(r"<td class=\"num\">(.*?)</td>", row.group(1))
    assert cells[:2] in (["0.173 ms", "0.159 ms"], ["0.159 ms", "0.173 ms"]) and cells[4].endswith(" µs")
    assert 0.3 < float(cells[2]) < 0.8 and 100 < float(cells[4].split()[0]) < 150
