"""Shared by the report tests: the fixture runs laid out in a folder, a small HTML table reader, the metrics a run
records twice."""

from __future__ import annotations

import json
import shutil
import sys
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))

import gpu_fixture  # noqa: E402


def repeats(records: list[dict]) -> list[tuple[str, str, str]]:
    """(experiment, metric, params) of every metric a record of `records` (results.json's) holds a second time."""
    found, seen = [], set()
    for rec in records:
        for m in rec["metrics"]:
            key = (rec["id"], m["name"], json.dumps(m["params"], sort_keys=True))
            found += [key] if key in seen else []
            seen.add(key)
    return found


def older_gpu_run(data: dict) -> dict:
    """The GPU fixture as an earlier run of the same profile: a day older, graph replay 1.5x slower, a cold cache."""
    data["run"]["started_at"] = "2026-11-28T09:00:00+00:00"
    data["manifest"]["created_at"] = "2026-11-28T09:00:00+00:00"
    data["manifest"]["label"] = "fixture-older"
    data["manifest"]["compile_cache"]["state"] = "cold"
    data["manifest"]["host"]["load_end"] = [6.0, 3.0, 1.0]
    for rec in data["experiments"]:
        for m in rec["metrics"]:
            if rec["id"] == "cuda_graph_decode" and m["name"] == "step_ms" and m["params"].get("method") == "graph":
                m["value"] *= 1.5
                m["spread"] = None
    return data


def lay_out_runs(root: Path) -> Path:
    """root/{gpu-fixture,gpu-fixture-older,cpu-smoke,malformed}: the OK-heavy GPU-like fixture, an older run of it
    (the same profile, so the comparison page has a pair by default), the CPU smoke run, a cut-off file."""
    from lab.contract.results import MANIFEST_NAME, RESULTS_NAME, write_json_atomic

    root.mkdir(parents=True, exist_ok=True)
    gpu_fixture.write(root / "gpu-fixture")
    older = older_gpu_run(gpu_fixture.build())
    write_json_atomic(root / "gpu-fixture-older" / RESULTS_NAME, older)
    write_json_atomic(root / "gpu-fixture-older" / MANIFEST_NAME, older["manifest"])
    for name in ("cpu-smoke", "malformed"):
        shutil.copytree(FIXTURES / "report_runs" / name, root / name)
    fail_one_check(root / "cpu-smoke" / RESULTS_NAME, "gemm_bound", "about 1.0x")
    return root


def fail_one_check(path: Path, experiment: str, name: str) -> None:
    """The pages show failed checks: the CPU fixture's run had none, so its copy here fails the non-fatal check of
    `experiment` whose name holds `name` (gemm_bound's "about 1.0x", as a loaded host once made it fail for real)."""
    import json

    data = json.loads(path.read_text())
    rec = next(r for r in data["experiments"] if r["id"] == experiment)
    check = next(c for c in rec["checks"] if not c["fatal"] and name in c["name"])
    check["passed"], check["detail"] = False, "3.55x, 95% interval [3.4, 3.7] (a failed check for the pages' tests)"
    path.write_text(json.dumps(data))


def texts(html: str, cls: str) -> list[str]:
    """The text of every element whose class attribute is exactly `cls`, tags removed, spaces collapsed."""
    import re

    out = []
    for m in re.finditer(rf'<(\w+)[^>]*class="{re.escape(cls)}"[^>]*>(.*?)</\1>', html, re.S):
        out.append(" ".join(unescape(re.sub(r"<[^>]+>", " ", m.group(2))).split()))
    return out


class Tables(HTMLParser):
    """Collects every <table> as {id, caption, rows: [[(text, class)]]}; good enough for content checks."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict] = []
        self._cell: list[str] | None = None
        self._cls = ""
        self._caption: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self.tables.append({"id": a.get("id") or "", "caption": "", "rows": []})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th") and self.tables:
            self._cell, self._cls = [], a.get("class") or ""
        elif tag == "caption":
            self._caption = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self.tables and self.tables[-1]["rows"]:
            self.tables[-1]["rows"][-1].append((" ".join("".join(self._cell).split()), self._cls))
            self._cell = None
        elif tag == "caption" and self._caption is not None:
            self.tables[-1]["caption"] = " ".join("".join(self._caption).split())
            self._caption = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data + " ")
        elif self._caption is not None:
            self._caption.append(data)


def tables(html: str) -> list[dict]:
    parser = Tables()
    parser.feed(html)
    return parser.tables


def table(html: str, *, id: str = "", caption: str = "") -> dict:
    """The one table with this id, or whose caption starts with `caption`."""
    found = [t for t in tables(html) if (id and t["id"] == id) or (caption and t["caption"].startswith(caption))]
    assert len(found) == 1, f"{len(found)} tables match id={id!r} caption={caption!r}"
    return found[0]


def row(t: dict, first: str) -> list[tuple[str, str]]:
    found = [r for r in t["rows"] if r and r[0][0] == first]
    assert found, f"no row starting {first!r} in {t['caption'] or t['id']}"
    return found[0]


def h200_reference() -> Path:
    """The committed H200 reference run that holds amdahl, ceilings and cuda_graph_decode (whatever its name; a FAILED
    record keeps what it measured before its failed check)."""
    import json

    for path in sorted((FIXTURES.parent.parent / "manifests" / "reference").glob("*/results.json")):
        data = json.loads(path.read_text())
        gpus = ((data["manifest"].get("gpu") or {}).get("nvidia_smi") or {}).get("gpus") or [{}]
        ok = {r["id"] for r in data["experiments"] if r["status"] == "OK" or r["metrics"]}  # FAILED keeps its measurements
        if "H200" in str(gpus[0].get("name")) and {"amdahl", "ceilings", "cuda_graph_decode"} <= ok:
            return path.parent
    raise AssertionError("no committed H200 reference run with amdahl, ceilings and cuda_graph_decode")
