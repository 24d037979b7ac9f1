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

from report import readme_tables

ROOT = Path(__file__).resolve().parents[1]


def test_readme_tables_are_the_headline_of_the_run_they_name() -> None:
    same, runs = readme_tables.check(ROOT / "README.md")
    assert runs.startswith("manifests/reference/")
    assert same, f"README.md's headline block is stale: python -m lab headline {runs} --write README.md"


def _fixture_run(tmp_path: Path, extra: list[dict] | None = None) -> Path:
    data = copy.deepcopy(gpu_fixture.build())
    cgd = next(r for r in data["experiments"] if r["id"] == "cuda_graph_decode")
    for m in extra or []:
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
    text = readme_tables.render([run])
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
    assert readme_tables.write(readme, ["run"])
    text = readme.read_text()
    assert text.startswith("# Title\n\nbefore\n\n<!-- headline:begin run -->\n") and text.endswith(
        "<!-- headline:end -->\n\nafter\n") and "stale" not in text
    assert readme_tables.check(readme) == (True, "run")
    assert not readme_tables.write(readme, ["run"])  # unchanged the second time
    readme.write_text(text.replace("×)", "x)", 1))
    proc = subprocess.run([sys.executable, "-m", "lab", "headline", "--check", str(readme)], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "differ from run" in proc.stderr and "--write" in proc.stderr


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    for args in (["headline"], ["headline", str(tmp_path / "missing")], ["headline", "--check", str(tmp_path / "x.md")]):
        proc = subprocess.run([sys.executable, "-m", "lab", *args], cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 2 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
