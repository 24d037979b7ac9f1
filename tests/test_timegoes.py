"""report.sections.breakdown and report.sections.breakdown_charts: where a step's time goes, from the stored figures only."""

from __future__ import annotations

import pytest

from report.sections import breakdown, breakdown_charts, steps
from report.draw.tables import fmt
from synthetic_runs import STEP, decode, metric, rec, results

TOP = [{"name": "sm90_xmma_gemm_f32", "count": 48, "us": 120.5}, {"name": "triton_red_fused_0", "count": 12,
                                                                  "us": 30.25}]


def _run(bf16_floor: bool = True):
    cgd = decode({"eager": 3.9, "graph": 0.7}, correct={"eager": True, "graph": True}, mbu={"eager": 0.03, "graph": 0.17},
                 gpu_busy_us={"eager": 600.0, "graph": 640.0}, gap_us={"eager": 3300.0, "graph": 60.0})
    cgd["notes"] = {"top_kernels.graph.b1.float32": TOP, "top_kernels.eager.b1.float32": TOP[:1]}
    cgd["samples"] = [{"name": "step_ms", "unit": "ms", "params": {"method": m, "readback": False, **STEP},
                       "values": [v * (1 + i / 100) for i in range(10)]} for m, v in (("eager", 3.9), ("graph", 0.7))]
    bf = {"batch": 1, "dtype": "bfloat16"}
    cgd["metrics"] += [metric("step_ms", 0.5, "ms", method="graph", readback=False, **bf),
                       metric("gpu_busy_us", 450.0, "us", method="graph", **bf),
                       metric("gap_us", 50.0, "us", method="graph", **bf)]
    ceil = [metric("bound_bandwidth_ms", 0.118, "ms", method="eager", **STEP),
            metric("bytes_per_step", 5.0e8, "B", method="eager", **STEP)]
    if bf16_floor:
        ceil.append(metric("bound_bandwidth_ms", 0.059, "ms", method="eager", **bf))
    return results(cgd, rec("ceilings", ceil))


def test_each_split_is_the_stored_figures() -> None:
    found = {(s.method, s.dtype): s for s in breakdown.splits(_run())}
    g = found[("graph", "float32")]
    assert (g.step_ms, g.busy_us, g.gap_us, g.floor_ms, g.mbu.value) == (0.7, 640.0, 60.0, 0.118, 0.17)
    assert g.parts == pytest.approx({"floor": 0.118, "above": 0.640 - 0.118, "gap": 0.060})
    assert found[("graph", "bfloat16")].floor_ms == 0.059  # the bf16 chart gets its own floor


def test_a_floor_ceilings_did_not_store_is_not_worked_out() -> None:
    """Bytes and a bandwidth stored, no bound_bandwidth_ms: no floor (one value per figure: the lab's, or none)."""
    res = _run(bf16_floor=False)
    res.experiments[0].metrics.append(type(res.experiments[0].metrics[0])(
        name="bandwidth_GBps", value=4000.0, unit="GB/s", params={"kind": "copy"}))
    res.experiments[1].metrics.append(type(res.experiments[0].metrics[0])(
        name="bytes_per_step", value=2.5e8, unit="B", params={"method": "eager", "batch": 1, "dtype": "bfloat16"}))
    assert breakdown.floor_ms(res, 1, "bfloat16") is None and breakdown.floor_ms(res, 1, "float32") == 0.118


def test_the_floor_table_shows_the_stored_values() -> None:
    table = breakdown.floor_table(breakdown.splits(_run()))
    row = next(r for r in table.rows if r[2].text == "graph" and r[1].text == "float32")
    assert [c.text for c in row[3:]] == [fmt(0.118, "ms"), fmt(640.0, "us"), fmt(60.0, "us"), fmt(0.7, "ms"), "17%"]


def test_top_kernels_are_a_table_per_batch_and_dtype() -> None:
    tables = breakdown.kernel_tables(_run())
    assert [t.id for t in tables] == ["top-kernels-b1-float32"]
    rows = [[c.text for c in r] for r in tables[0].rows]
    assert rows[0][:4] == ["eager", "1", "sm90_xmma_gemm_f32", "48"]
    graph = [r for r in rows if r[2] == "triton_red_fused_0"][0]
    assert graph[4] == fmt(30.25, "us") and graph[5] == steps.pct(30.25 / 640.0)


def test_the_panel_opens_the_step_section() -> None:
    section = breakdown_charts.step_section(_run())
    assert section.panel is not None and section.panel.id == "where-time-goes"
    kinds = [getattr(b, "id", "") for b in section.panel.blocks]
    assert kinds[:3] == ["chart-time-float32", "chart-time-bfloat16", "floor-table"]
    assert "chart-samples-float32" in kinds
    assert "graph: step 0.7 ms, GPU-busy 640 us (the floor 0.118 ms of it), gaps 60 us, MBU 17%" in section.panel.intro
    # a run that profiled nothing has no panel (nothing stored to split)
    bare = results(decode({"eager": 3.9, "graph": 0.7}, correct={"eager": True, "graph": True}))
    assert breakdown_charts.step_section(bare).panel is None


def test_stacked_bars_draw_the_stored_parts() -> None:
    charts = breakdown_charts.stacked([s for s in breakdown.splits(_run()) if s.parts])
    assert [c.id for c in charts] == ["chart-time-float32", "chart-time-bfloat16"] and not charts[0].error
    bars = charts[0].data["bars"]["b1"]
    assert bars["eager"] == pytest.approx({"floor": 0.118, "above": 0.6 - 0.118, "gap": 3.3, "step": 3.9})
    assert "log" not in charts[0].svg  # bars on a linear axis


def test_boxes_draw_every_stored_sample() -> None:
    charts = breakdown_charts.boxes(breakdown.samples(_run()))
    assert [c.id for c in charts] == ["chart-samples-float32"]
    assert {m: v["n"] for m, v in charts[0].data["boxes"]["b1"].items()} == {"eager": 10, "graph": 10}


def test_the_fused_step_kernel_by_kernel_follows_the_top_kernels_in_the_panel() -> None:
    """A stored fused_kernels note (report.sections.fused_kernels) is a table of the panel, after the top-kernels tables."""
    from lab.step.fused import breakdown as kernels, traffic

    shape, layout = traffic.Shape(12, 768, 12, 50257, 1, 4, 256), traffic.Layout("gemv", 4, 786)
    seq = [(str(c.function), 4.0) for c in traffic.calls(shape, layout, 64)]
    run = _run()
    run.experiments[0].notes["fused_kernels.fused.b1.float32"] = kernels.table(
        "fused", STEP, shape, layout, 64, seq, 300.0, None, pdl=False)
    assert [t.id for t in breakdown.kernel_tables(run)] == ["top-kernels-b1-float32", "fused-kernels-fused-b1-float32"]
    panel = breakdown_charts.step_section(run).panel
    assert panel is not None and "fused-kernels-fused-b1-float32" in [getattr(b, "id", "") for b in panel.blocks]
