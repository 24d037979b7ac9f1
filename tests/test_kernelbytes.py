"""report.sections.fused_kernels: the hand-fused step kernel by kernel in "where the time goes", from the stored notes only."""

from __future__ import annotations

import copy

from lab.contract import notes as N
from lab.contract.results import from_dict
from lab.step.fused import breakdown, traffic as T
from report.sections import fused_kernels
from report.sections.steps import pct
from report.draw.tables import fmt
from report_helpers import gpu_fixture
from synthetic_runs import decode, results

GPT2 = T.Shape(12, 768, 12, 50257, 1, 4, 256)
LAYOUT = T.Layout("gemv", 4, 786)
US = {"ln_qkv": 4.12, "attention": 4.15, "proj": 3.60, "ln_fc": 4.95, "fc2": 4.74, "lm_head": 38.2, "argmax": 1.8}


def _note(method: str = "fused", pdl: bool = False, seq: list | None = None, **params) -> dict:
    step = T.calls(GPT2, LAYOUT, 64)
    seq = seq if seq is not None else [(c.function, US[c.kernel]) for c in step]
    return breakdown.table(method, {"batch": 1, "dtype": "float32", **params}, GPT2, LAYOUT, 64, seq, 327.0, None,
                           pdl=pdl)


def _run(**notes: dict):
    cgd = decode({"eager": 3.9, "fused": 0.327}, correct={"eager": True, "fused": True})
    cgd["notes"] = notes
    return results(cgd)


def test_a_table_per_note_with_each_kernels_time_bytes_bandwidth_and_share() -> None:
    note = _note()
    tables = fused_kernels.tables(_run(**{"fused_kernels.fused.b1.float32": note}))
    assert [t.id for t in tables] == ["fused-kernels-fused-b1-float32"] and not tables[0].collapsed
    rows = {r[0].text: [c.text for c in r] for r in tables[0].rows}
    assert list(rows) == ["ln_qkv", "attention", "proj", "ln_fc", "fc2", "lm_head", "argmax", "all kernels"]
    fc = next(r for r in note["kernels"] if r["kernel"] == "ln_fc")
    assert rows["ln_fc"][1:] == ["12", fmt(4.95, "us"), f"{fmt(fc['bytes_per_call'] / 1e6)} MB",
                                 fmt(fc["gbps"] / 1e3), pct(fc["share"])]
    assert rows["ln_fc"][3] == "9.47 MB" and rows["ln_fc"][4] == "1.91"  # 4.95 µs for 9.47 MB
    assert rows["all kernels"][1] == "62" and rows["all kernels"][5] == pct(note["kernel_us"] / 327.0)
    cap = tables[0].caption
    assert f"{fmt(note['kernel_us'], 'us')} of kernels in a {fmt(327.0, 'us')} step" in cap
    assert f"≈ {fmt(note['fit']['fixed_us'], 'us')} + bytes ÷ {fmt(note['fit']['bandwidth_gbps'] / 1e3)} TB/s" in cap
    assert f"the fixed part is {pct(note['fit']['fixed_share'])} of their time" in cap and "Not additive" not in cap


def test_a_pdl_table_is_folded_under_its_caveat() -> None:
    tables = fused_kernels.tables(_run(**{"fused_kernels.fused-pdl.b1.float32": _note("fused-pdl", pdl=True),
                                        "fused_kernels.fused.b1.float32": _note()}))
    assert [t.id for t in tables] == ["fused-kernels-fused-b1-float32", "fused-kernels-fused-pdl-b1-float32"]
    pdl = tables[1]
    assert pdl.collapsed and f"Not additive: {breakdown.PDL_CAVEAT}." in pdl.caption and "Fit over" not in pdl.caption


def test_a_profile_that_did_not_match_shows_its_bytes_and_why() -> None:
    note = _note(seq=[("triton_poi_fused_0", 1.0)])
    table = fused_kernels.tables(_run(**{"fused_kernels.fused.b1.float32": note}))[0]
    assert f"No times: {note['why']}." in table.caption
    row = [c.text for c in table.rows[3]]
    assert row[2] == "—" and row[3] == "9.47 MB" and row[4] == "—" and row[5] == "—"


def test_a_note_of_another_shape_is_left_out() -> None:
    bad = {k: v for k, v in _note().items() if k != "kernels"}
    assert fused_kernels.tables(_run(**{"fused_kernels.fused.b1.float32": bad, "top_kernels.fused.b1.float32": []})) == []


def test_the_gpu_fixture_shows_fp32_and_bf16_and_the_pdl_caveat() -> None:
    data = copy.deepcopy(gpu_fixture.build())
    for rec in data["experiments"]:
        assert N.problems(rec["id"], rec["notes"]) == [], rec["id"]
    tables = fused_kernels.tables(from_dict(data, "fixture/results.json"))
    assert [t.id for t in tables] == ["fused-kernels-fused-b1-float32", "fused-kernels-fused-pdl-b1-float32",
                                      "fused-kernels-fused-b1-bfloat16"]
    fp32, pdl, bf16 = tables
    assert "Fit over" in fp32.caption and "Fit over" in bf16.caption and "Not additive" in pdl.caption
    bytes_fp32 = next(r for r in fp32.rows if r[0].text == "ln_fc")[3].text
    bytes_bf16 = next(r for r in bf16.rows if r[0].text == "ln_fc")[3].text
    assert (bytes_fp32, bytes_bf16) == ("9.47 MB", "4.74 MB")  # half the weights (the fp32 activations stay)
