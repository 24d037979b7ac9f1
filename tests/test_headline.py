"""`python -m lab headline`: the README's headline tables are made from a run, never typed.

The README's block must be exactly the headline of the run its marker names (today the committed
H200 reference; the lead's next single-run reference replaces it with one command). The tables are
checked against a synthetic run (tests/fixtures/gpu_fixture.py) for what they show and for "—" where
the run recorded nothing.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from report_helpers import gpu_fixture

from report.pages import headline

ROOT = Path(__file__).resolve().parents[1]


def test_readme_tables_are_the_headline_of_the_run_they_name() -> None:
    same, runs = headline.check(ROOT / "README.md")
    assert runs.startswith("manifests/reference/")
    assert same, f"README.md's headline block is stale: python -m lab headline {runs} --write README.md"


def _fixture_run(tmp_path: Path, extra: list[dict] | None = None) -> Path:
    data = copy.deepcopy(gpu_fixture.build())
    cgd = next(r for r in data["experiments"] if r["id"] == "cuda_graph_decode")
    for m in extra or []:  # a figure the fixture stores already takes the given value
        cgd["metrics"] = [o for o in cgd["metrics"] if (o["name"], o["params"]) != (m["name"], m["params"])]
        cgd["metrics"].append({"unit": "us", "spread": None, **m})
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(json.dumps(data))
    (run / "manifest.json").write_text(json.dumps(data["manifest"]))
    return run


def test_tables_show_what_the_run_recorded_and_a_dash_elsewhere(tmp_path: Path) -> None:
    busy = {"name": "gpu_busy_us", "value": 412.0, "params": {"method": "compile+graph", "batch": 1, "dtype": "float32"}}
    run = _fixture_run(tmp_path, [busy])
    data = json.loads((run / "results.json").read_text())
    cgd = next(r for r in data["experiments"] if r["id"] == "cuda_graph_decode")
    step = {(m["params"]["method"], m["params"]["batch"]): m["value"] for m in cgd["metrics"]
            if m["name"] == "step_ms" and m["params"].get("readback") is False and m["params"]["dtype"] == "float32"}
    text = headline.render([run])
    rows = {line.split(" | ")[0].strip("| `"): line for line in text.splitlines() if line.startswith("| `")}
    eager1, cg1 = step[("eager", 1)], step[("compile+graph", 1)]
    assert f"| `compile+graph` | {cg1:.3f} ({eager1 / cg1:.2f}×) |" in text  # step table, speedup over eager
    floor_rows = [line for line in text.splitlines() if line.startswith("| `compile+graph` | fp32 B=1 |")]
    assert len(floor_rows) == 1 and "| 412 |" in floor_rows[0]  # GPU busy from the run
    assert floor_rows[0].count("—") >= 3  # gaps, teacher forcing: not in this run
    assert "`eager`, token read back" in text and "eager" in rows
    assert "measures divergence after near-ties, not error" in text


def test_write_replaces_only_the_block_and_check_sees_an_edit(tmp_path: Path) -> None:
    _fixture_run(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text("# Title\n\nbefore\n\n<!-- headline:begin old/run -->\nstale\n<!-- headline:end -->\n\nafter\n")
    assert headline.write(readme, ["run"])
    text = readme.read_text()
    assert text.startswith("# Title\n\nbefore\n\n<!-- headline:begin run -->\n") and text.endswith(
        "<!-- headline:end -->\n\nafter\n") and "stale" not in text
    assert headline.check(readme) == (True, "run")
    assert not headline.write(readme, ["run"])  # unchanged the second time
    readme.write_text(text.replace("×)", "x)", 1))
    proc = subprocess.run([sys.executable, "-m", "lab", "headline", "--check", str(readme)], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "differ from run" in proc.stderr and "--write" in proc.stderr


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    for args in (["headline"], ["headline", str(tmp_path / "missing")], ["headline", "--check", str(tmp_path / "x.md")]):
        proc = subprocess.run([sys.executable, "-m", "lab", *args], cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 2 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr


# ---------------------------------------------------------------------------- distance to the floor, MBU, intervals

H200 = ROOT / "manifests" / "reference" / "h200-2026-12-02-gpu"


def _stored(path: Path, exp: str, name: str, **params) -> object:
    data = json.loads((path / "results.json").read_text())
    rec = next(r for r in data["experiments"] if r["id"] == exp)
    hits = [m["value"] for m in rec["metrics"] if m["name"] == name
            and all(m["params"].get(k) == v for k, v in params.items())]
    assert len(hits) >= 1, (exp, name, params)
    return hits[0]


def _cells(text: str, first: str, second: str | None = None) -> list[str]:
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells and cells[0] == first and (second is None or cells[1] == second):
            return cells
    raise AssertionError(f"no row {first} {second or ''}")


def test_the_floor_and_mbu_are_the_stored_ones_on_the_h200_reference() -> None:
    """The floor is ceilings' stored bound_bandwidth_ms; MBU is what cuda_graph_decode stored beside that step, never
    a value worked out here (the run page shows the same: tests/test_one_value.py)."""
    text = headline.render([H200])
    nbytes = _stored(H200, "ceilings", "bytes_per_step", batch=1, dtype="float32")
    floor_ms = _stored(H200, "ceilings", "bound_bandwidth_ms", batch=1, dtype="float32")
    for method in ("fused-pdl-prefetch", "compile+graph", "eager"):
        step = _stored(H200, "cuda_graph_decode", "step_ms", method=method, batch=1, dtype="float32", readback=False)
        busy = _stored(H200, "cuda_graph_decode", "gpu_busy_us", method=method, batch=1, dtype="float32")
        gap = _stored(H200, "cuda_graph_decode", "gap_us", method=method, batch=1, dtype="float32")
        mbu = _stored(H200, "cuda_graph_decode", "mbu", method=method, batch=1, dtype="float32")
        row = _cells(text, f"`{method}`", "fp32 B=1")
        assert row[2] == f"{step:.3f}" and row[5] == f"{busy:.0f}" and row[6] == f"{gap:.0f}"
        assert row[7] == f"{nbytes / 1e6:.0f}" and row[8] == f"{floor_ms:.3f}"
        assert row[9] == f"{float(mbu) * 100:.1f}%", method
        assert _cells(text.split("MBU per batch", 1)[1], f"`{method}`")[1] == row[9]
    assert "rounds: 5 at B=1, 3 at B=64" in text  # not "5 rounds" for every batch


def test_a_stored_mbu_and_a_stored_interval_are_used(tmp_path: Path) -> None:
    p = {"method": "compile+graph", "batch": 1, "dtype": "float32"}
    extra = [{"name": "mbu", "value": 0.3456, "unit": "fraction", "params": p},
             {"name": "speedup_ci_low", "value": 5.5, "unit": "x", "params": p | {"readback": False}},
             {"name": "speedup_ci_high", "value": 6.25, "unit": "x", "params": p | {"readback": False}}]
    text = headline.render([_fixture_run(tmp_path, extra)])
    assert "[5.50, 6.25])" in _cells(text, "`compile+graph`")[1]  # the step table's B=1 cell
    assert "speedup over eager [its 95% interval]" in text
    assert _cells(text, "`compile+graph`", "fp32 B=1")[9] == "34.6%"
    assert _cells(text.split("MBU per batch", 1)[1], "`compile+graph`")[1] == "34.6%"


def test_check_passes_after_write_on_the_readme(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text((ROOT / "README.md").read_text())
    headline.write(readme, ["manifests/reference/h200-2026-12-02-gpu"], root=ROOT)
    assert headline.check(readme, root=ROOT) == (True, "manifests/reference/h200-2026-12-02-gpu")
    assert "| `fused-pdl-prefetch` | fp32 B=1 | 0.252 |" in readme.read_text()


def test_the_readme_prose_quotes_the_stored_reference() -> None:
    """Figures the README quotes outside the generated tables, checked against the committed H200 reference."""
    import json

    readme = (ROOT / "README.md").read_text()
    ref = json.loads((ROOT / "manifests" / "reference" / "h200-2026-12-02-gpu" / "results.json").read_text())
    cost = next(r for r in ref["experiments"] if r["id"] == "compile_cost")
    first = {m["params"]["phase"]: m["value"] for m in cost["metrics"]
             if m["name"] == "first_call_s" and m["params"].get("target") == "decode_core"}
    assert f"{first['cold']:.2f} s cold, {first['warm']:.2f} s warm" in readme.replace("\n", " ")
    dec = next(r for r in ref["experiments"] if r["id"] == "cuda_graph_decode")
    diffs = {}
    for m in dec["metrics"]:
        if m["name"] == "max_logit_diff" and m["params"].get("dtype") == "float32" and m["value"]:
            diffs.setdefault(m["params"]["method"], []).append(m["value"])
    compiled, fused = diffs["compile-default"], diffs["fused"]
    text = readme.replace("\n", " ")

    def short(x: float) -> str:
        return f"{x:.1e}".replace("e-05", "e-5").replace("e-04", "e-4")

    assert f"{short(min(compiled))} to {short(max(compiled))} compiled" in text
    assert f"{short(min(fused))} to {short(max(fused))} fused" in text


# ---------------------------------------------------------------------------- the compile view

def _timed(method: str, ms: float, ci: tuple[float, float] | None, batch: int = 1) -> dict:
    """A stored step_ms whose spread holds (or lacks) the 95% interval of its median."""
    spread = {"n": 640, "median": ms, "q1": ms, "q3": ms, "min": ms, "max": ms, "rel_iqr": 0.0, "noisy": False}
    if ci is not None:
        spread |= {"ci_low": ci[0], "ci_high": ci[1]}
    return {"name": "step_ms", "value": ms, "unit": "ms", "spread": spread,
            "params": {"method": method, "batch": batch, "dtype": "float32", "readback": False}}


def _compile_run(tmp_path: Path, compile_cost: str = "OK") -> Path:
    """The fixture with Inductor's levers timed at batch 1 against compile+graph (1.000 ms [0.98, 1.02]): one faster
    and one slower by disjoint intervals, one the same (overlapping), one without an interval; max-autotune+graph
    reused max-autotune's compile; `compile_cost`: OK, NOT_RUN or absent."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    p1 = {"batch": 1, "dtype": "float32"}
    extra = [_timed("compile+graph", 1.0, (0.98, 1.02)), _timed("max-autotune+graph", 0.9, (0.88, 0.92)),
             _timed("compile+graph+coord-descent", 1.1, (1.08, 1.12)), _timed("compile+graph+pdl", 0.99, (0.97, 1.01)),
             _timed("max-autotune-no-cudagraphs", 0.95, None)]
    extra += [{"name": "setup_s", "value": s, "unit": "s", "params": p1 | {"method": m}}
              for m, s in (("max-autotune-no-cudagraphs", 95.5), ("max-autotune+graph", 0.25))]
    extra += [{"name": "compiled_frames", "value": 3, "unit": "count", "params": p1 | {"method": "max-autotune-no-cudagraphs"}},
              {"name": "break_even_steps", "value": 43210, "unit": "steps", "params": p1 | {"method": "max-autotune+graph"}},
              {"name": "recompiles_during_timing", "value": 0, "unit": "count", "params": p1}]
    run = _fixture_run(tmp_path, extra)
    data = json.loads((run / "results.json").read_text())
    cgd = next(r for r in data["experiments"] if r["id"] == "cuda_graph_decode")
    cgd["notes"]["break_even_includes.b1.float32"] = {
        "max-autotune+graph": "max-autotune-no-cudagraphs's compile (its setup_s reused that compilation)"}
    cgd["skipped"] = [{"item": "compile+graph+combo", "code": "profile_budget", "message": "costly"},
                      {"item": "reduce-overhead at batch 64", "code": "profile_budget", "message": "batch 1 only"},
                      {"item": "fused", "code": "no_triton", "message": "install triton"}]
    if compile_cost == "absent":
        data["experiments"] = [r for r in data["experiments"] if r["id"] != "compile_cost"]
    elif compile_cost != "OK":
        cc = next(r for r in data["experiments"] if r["id"] == "compile_cost")
        cc.update(status=compile_cost, metrics=[], reason={"code": "no_cxx_compiler", "message": "install g++"})
    (run / "results.json").write_text(json.dumps(data))
    return run


def _compiled_rows(text: str) -> dict[tuple[str, str], list[str]]:
    """The compile table's rows by (method, case)."""
    table = text.split("Compiled methods (cuda_graph_decode), per case", 1)[1].split("Compile time against depth", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines() if line.startswith("| `")]
    return {(r[0], r[1]): r for r in rows}


def test_the_compile_view_sets_each_compiled_method_against_compile_graph(tmp_path: Path) -> None:
    rows = _compiled_rows(headline.render([_compile_run(tmp_path)], view="compile"))
    faster, slower = rows[("`max-autotune+graph`", "fp32 B=1")], rows[("`compile+graph+coord-descent`", "fp32 B=1")]
    same, unknown = rows[("`compile+graph+pdl`", "fp32 B=1")], rows[("`max-autotune-no-cudagraphs`", "fp32 B=1")]
    assert faster[5] == "0.900" and faster[7:9] == ["1.111×", "faster"]  # 1.000 / 0.900, [0.88, 0.92] below
    assert slower[7:9] == ["0.909×", "slower"] and same[7:9] == ["1.010×", "same"]
    assert unknown[7:9] == ["1.053×", "—"]  # its median has no stored interval
    assert unknown[2:5] == ["95.50", "3", "0"] and faster[9] == "43210"  # setup, frames, recompiles; break-even
    assert rows[("`compile+graph`", "fp32 B=1")][7:9] == ["1.000×", "reference"]
    assert {m for m, _ in rows} == {"`compile-default`", "`reduce-overhead`", "`reduce-overhead-static`",
                                    "`compile+graph`", "`compile+graph+pdl`", "`compile+graph+coord-descent`",
                                    "`max-autotune-no-cudagraphs`", "`max-autotune+graph`"}  # no eager, graph, fused
    assert [c for m, c in rows if m == "`compile+graph`"] == ["fp32 B=1", "fp32 B=8", "fp32 B=64", "bf16 B=1"]
    assert list(dict.fromkeys(m for m, _ in rows))[-2:] == ["`max-autotune-no-cudagraphs`", "`max-autotune+graph`"]


def test_a_reused_compile_is_footnoted_and_skipped_methods_are_listed(tmp_path: Path) -> None:
    text = headline.render([_compile_run(tmp_path)], view="compile")
    assert _compiled_rows(text)[("`max-autotune+graph`", "fp32 B=1")][2] == "0.25¹"
    assert _compiled_rows(text)[("`max-autotune-no-cudagraphs`", "fp32 B=1")][2] == "95.50"
    assert ("¹ `max-autotune+graph` at fp32 B=1 reused max-autotune-no-cudagraphs's compile (its setup_s reused that "
            "compilation): its setup and compiled frames count only what it added") in text
    assert ("Not run here: `compile+graph+combo` (profile_budget), `reduce-overhead` at batch 64 (profile_budget)."
            in text.splitlines())  # fused is not a compiled method


def test_the_compile_view_opens_as_the_default_one_and_names_its_view(tmp_path: Path) -> None:
    run = _compile_run(tmp_path)
    default, compiled = headline.render([run], ["r"]), headline.render([run], ["r"], view="compile")
    head = compiled.split("Compiled methods (cuda_graph_decode), per case", 1)[0]
    assert head.startswith("<!-- made by `python -m lab headline r --view compile --write README.md`")
    assert default.startswith(head.replace(" --view compile", "")) and "Measured by `r`" in head
    assert "Compiled methods" not in default


def test_compile_time_against_depth_as_compile_cost_stored_it(tmp_path: Path) -> None:
    text = headline.render([_compile_run(tmp_path)], view="compile")
    depth = text.split("Compile time against depth", 1)[1]
    assert _cells(depth, "`decode_core`", "2")[2:] == ["10.28", "3.36", "—", "—"]
    assert _cells(depth, "`decode_core`", "12")[2:] == ["25.70", "8.40", "15889", "10036"]  # at the full depth
    assert _cells(depth, "`mlp`")[1:] == ["—", "2.03", "0.91", "never", "never"]
    assert "(11 timed calls of each side per process)" in depth


def test_without_compile_cost_one_line_says_why(tmp_path: Path) -> None:
    absent = headline.render([_compile_run(tmp_path / "a", "absent")], view="compile")
    assert absent.rstrip().endswith("compile_cost: not in this run.") and "Compile time against depth" not in absent
    failed = headline.render([_compile_run(tmp_path / "n", "NOT_RUN")], view="compile")
    assert failed.rstrip().endswith("compile_cost: NOT_RUN (no_cxx_compiler: install g++).")


def test_markers_name_a_view_or_none() -> None:
    text = ("<!-- headline:begin a b -->\nx\n<!-- headline:end -->\n"
            "<!-- headline:begin[compile] c -->\ny\n<!-- headline:end -->\n")
    found = headline.blocks(text)
    assert [(b.view, b.runs) for b in found] == [("default", ["a", "b"]), ("compile", ["c"])]
    assert text[found[1].start:found[1].end] == "\ny\n" and text[found[0].start:found[0].end] == "\nx\n"
    assert headline.find_block(text, view="compile")[2] == ["c"] and headline.find_block(text)[2] == ["a", "b"]
    assert headline.marker("compile", ["c"]) == "<!-- headline:begin[compile] c -->"
    assert headline.marker("default", ["a", "b"]) == "<!-- headline:begin a b -->"
    for bad, why in (("<!-- headline:begin[nope] c -->\n<!-- headline:end -->", "unknown headline view"),
                     ("<!-- headline:begin[default] c -->\n<!-- headline:end -->", "unknown headline view"),
                     (text + "<!-- headline:begin[compile] d -->\n<!-- headline:end -->", "a second headline[compile]"),
                     ("<!-- headline:begin a -->\n<!-- headline:begin[compile] c -->\n<!-- headline:end -->",
                      "inside the block before it"),
                     ("<!-- headline:begin[compile] c -->\n", "missing after")):
        with pytest.raises(ValueError, match=re.escape(why)):
            headline.blocks(bad)
    with pytest.raises(ValueError, match=re.escape("has no headline[compile] block: add the empty pair "
                                                   "`<!-- headline:begin[compile] -->` and `<!-- headline:end -->`")):
        headline.find_block(text.split("<!-- headline:begin[compile]")[0], view="compile")


def test_the_compile_view_judges_compile_tunings_rows_against_its_own_compile_graph(tmp_path: Path) -> None:
    """A run with compile_tuning gets a second table: its tuned compiles at every batch, each against the compile+graph
    timed in its own rounds (here 0.800 ms [0.78, 0.82]), never cuda_graph_decode's (1.000 ms)."""
    run = _compile_run(tmp_path)
    data = json.loads((run / "results.json").read_text())
    tuning = json.loads(json.dumps(next(r for r in data["experiments"] if r["id"] == "cuda_graph_decode")))
    tuning["id"] = "compile_tuning"
    tuning["metrics"] = [m for m in tuning["metrics"] if not (m["name"] == "step_ms" and m["params"].get("method")
                                                              == "compile+graph")]
    tuning["metrics"] += [_timed("compile+graph", 0.8, (0.78, 0.82)), _timed("max-autotune+graph", 0.7, (0.69, 0.71),
                                                                             batch=8),
                          _timed("compile+graph", 0.75, (0.74, 0.76), batch=8)]
    tuning["skipped"] = [{"item": "max-autotune+graph (batch=1 dtype=bfloat16)", "code": "no_cuda", "message": "cuda"}]
    data["experiments"].insert(next(i for i, r in enumerate(data["experiments"]) if r["id"] == "cuda_graph_decode") + 1,
                               tuning)
    (run / "results.json").write_text(json.dumps(data))
    text = headline.render([run], view="compile")
    first = _compiled_rows(text.split("The tuned compiles at every batch")[0] + "Compile time against depth")
    assert first[("`max-autotune+graph`", "fp32 B=1")][7:9] == ["1.111×", "faster"]  # against 1.000 ms
    part = text.split("The tuned compiles at every batch (compile_tuning)", 1)[1].split("Compile time against depth")[0]
    rows = {(r[0], r[1]): r for r in ([c.strip() for c in line.strip("|").split("|")] for line in part.splitlines()
                                      if line.startswith("| `"))}
    assert rows[("`max-autotune+graph`", "fp32 B=1")][7:9] == ["0.889×", "slower"]  # 0.800 / 0.900, disjoint
    assert rows[("`max-autotune+graph`", "fp32 B=8")][7:9] == ["1.071×", "faster"]  # 0.75 / 0.70
    assert rows[("`compile+graph`", "fp32 B=8")][7:9] == ["1.000×", "reference"]
    assert "Not run here: `max-autotune+graph` (batch=1 dtype=bfloat16) (no_cuda)." in part
    assert "compile_tuning" not in headline.render([_compile_run(tmp_path / "plain")], view="compile")
