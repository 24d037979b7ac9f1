"""`python -m lab headline`: the README's headline tables are made from a run, never typed.

The README's block must be exactly the headline of the run its marker names (today the committed
H200 reference; the lead's next single-run reference replaces it with one command). The tables are
checked against a synthetic run (tests/fixtures/gpu_fixture.py) for what they show and for "—" where
the run recorded nothing.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

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
