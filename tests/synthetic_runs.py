"""Shared by the report's section tests: tiny synthetic runs built record by record (no measurement, no file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lab.contract.results import Results, from_dict

STEP = {"batch": 1, "dtype": "float32"}


def metric(name: str, value: Any, unit: str = "", spread: dict[str, Any] | None = None, **params: Any) -> dict:
    return {"name": name, "value": value, "unit": unit, "params": params, "spread": spread}


def rec(rid: str, metrics: list[dict], status: str = "OK", checks: list[dict] | None = None,
        notes: dict[str, Any] | None = None, samples: list[dict] | None = None) -> dict:
    return {"id": rid, "title": rid, "status": status, "metrics": metrics, "checks": checks or [],
            "notes": notes or {}, "samples": samples or [],
            "reason": {"code": "check_failed", "message": "a fatal check failed"} if status == "FAILED" else None}


def check(name: str, passed: bool, detail: str = "", **params: Any) -> dict:
    return {"name": name, "passed": passed, "detail": detail, "params": params, "fatal": False}


def raw(*records: dict, manifest: dict[str, Any] | None = None, profile: str = "gpu") -> dict:
    return {"schema": 1, "lab_version": "0", "manifest": {"manifest_version": 1, **(manifest or {})},
            "run": {"profile": profile, "started_at": "2026-12-01T00:00:00+00:00", "state": "complete"},
            "experiments": list(records)}


def results(*records: dict, manifest: dict[str, Any] | None = None, profile: str = "gpu") -> Results:
    return from_dict(raw(*records, manifest=manifest, profile=profile), "synthetic/results.json")


def write_run(folder: Path, *records: dict, **kw: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(raw(*records, **kw)))
    return folder


def decode(methods: dict[str, float], *, correct: dict[str, bool] | None = None, tokens: dict[str, bool] | None = None,
           ci: dict[str, tuple[float, float]] | None = None, mbu: dict[str, float] | None = None,
           status: str = "OK", **extra: dict) -> dict:
    """cuda_graph_decode at batch 1, fp32: step_ms per method, speedups over eager, and what else is given."""
    ms = []
    for m, v in methods.items():
        ms.append(metric("step_ms", v, "ms", method=m, readback=False, **STEP))
        if m != "eager":
            ms.append(metric("speedup_vs_eager", round(methods["eager"] / v, 4), "x", method=m, readback=False, **STEP))
    for m, (lo, hi) in (ci or {}).items():
        ms += [metric("speedup_ci_low", lo, "x", method=m, readback=False, **STEP),
               metric("speedup_ci_high", hi, "x", method=m, readback=False, **STEP)]
    for name, values in (("correct", correct), ("tokens_equal", tokens), ("mbu", mbu)):
        ms += [metric(name, v, method=m, **STEP) for m, v in (values or {}).items()]
    for name, values in extra.items():
        ms += [metric(name, v, method=m, **STEP) for m, v in values.items()]
    return rec("cuda_graph_decode", ms, status=status)
