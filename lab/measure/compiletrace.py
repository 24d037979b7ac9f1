"""Compile traces: what torch.compile did for one compiled item, kept small enough to commit with a run.

While an item compiles, Dynamo and Inductor can write a structured trace (the `TORCH_TRACE` format
that tlparse reads): one record per event, each compile identified as `frame/compile` ("0/1" is the
second compile of the first frame, a recompilation), with its compile times, guard and op counts,
graph breaks, recompile reasons and failures, and large payloads (graphs, generated code) beside
them. A trace of GPT-2 1.5B's step runs to megabytes, so the run directory keeps, per item, under
`traces/<experiment>/<item>/`:

- `summary.json`: one entry per compile (`per_compile`) (id, function, where, status, graph ops, guards, times,
  recompile reasons, graph-break reasons, failure) and what was dropped;
- `metadata.jsonl.gz`: every record's metadata, payloads dropped except the small ones that carry
  reasons (recompile reasons, graph-break reasons) - a few kilobytes;
- `tlparse/`: tlparse's HTML when `tlparse` is on PATH (`pip install tlparse`: a py3-none manylinux
  wheel), pruned to `MAX_TLPARSE_BYTES` (its index and compile-metrics pages first; generated
  code and graph dumps are the large files and go first). Without tlparse the experiment lists the
  part as skipped (`no_tlparse`) and the report renders the summary as the trace page.

In the lab's process (`traced`): torch only opens its trace file when `TORCH_TRACE` was set at
import, so a handler is installed into torch's trace logger for the duration of the block (torch's
own `LazyTraceHandler`, written where `torch._logging.set_logs` re-adds it). In a child process
(`child_env`): `TORCH_TRACE` is set in its environment. Compile times measured inside a traced
block include the trace's own writing (its share is `structured_logging_overhead_s` in the summary).
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import logging
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterator

from lab.atomic import write_bytes_atomic
from lab.contract.reasons import Code

TRACES_DIR = "traces"
MAX_TLPARSE_BYTES = 96 * 1024  # tlparse's pages kept per item
MAX_EXPERIMENT_BYTES = 1 << 20  # past this much in an experiment's traces/ folder, items keep no tlparse pages
MAX_TLPARSE_FILE_BYTES = 48 * 1024
MAX_SMALL_PAYLOAD = 4096  # payloads kept in metadata.jsonl.gz (reasons, not graphs)
KEPT_PAYLOADS = ("recompile_reasons", "dynamo_graph_break_reason", "dynamo_error", "guard_added", "graph_break")
NOISE = ("chromium_event", "describe_storage", "describe_tensor", "describe_source")
TLPARSE_FIRST = ("index.html", "failures_and_restarts.html", "compile_directory.json")
TLPARSE_NEXT = ("compilation_metrics", "recompile_reasons", "dynamo_graph_break_reason", "dynamo_guards")
METRIC_FIELDS = ("co_name", "co_filename", "co_firstlineno", "cache_size", "guard_count", "shape_env_guard_count",
                 "graph_op_count", "graph_node_count", "graph_input_count", "entire_frame_compile_time_s",
                 "backend_compile_time_s", "inductor_compile_time_s", "code_gen_time_s", "fail_type", "fail_reason",
                 "fail_user_frame_filename", "fail_user_frame_lineno", "restart_reasons", "recompile_reason",
                 "structured_logging_overhead_s", "dynamo_time_before_restart_s")


def slug(item: str) -> str:
    """A file-name-safe folder name for an item ("static+compile b8" -> "static-compile-b8")."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", item).strip("-.") or "item"


def tlparse_path() -> str | None:
    """tlparse on PATH, or installed beside this interpreter (pip's scripts folder of this environment)."""
    import sysconfig

    return shutil.which("tlparse") or shutil.which("tlparse", path=sysconfig.get_path("scripts"))


# ---------------------------------------------------------------------------- capturing

@contextlib.contextmanager
def tracing(raw_dir: Path) -> Iterator[None]:
    """Write torch's structured trace of everything compiled inside the block into `raw_dir`."""
    import torch._logging._internal as internal

    handler = internal.LazyTraceHandler(str(raw_dir))
    handler.setFormatter(internal.TorchLogsFormatter(trace=True))
    log = internal.trace_log
    saved = list(log.handlers)
    saved_global, saved_level = internal.LOG_TRACE_HANDLER, log.level
    for h in saved:  # torch's idle handler removes itself on first use, which would skip ours for that record
        log.removeHandler(h)
    internal.LOG_TRACE_HANDLER = handler  # torch._logging.set_logs() inside the block re-adds this one
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        log.removeHandler(handler)
        handler.close()
        internal.LOG_TRACE_HANDLER = saved_global
        for h in saved:
            if h not in log.handlers:
                log.addHandler(h)
        log.setLevel(saved_level)


def child_env(raw_dir: Path) -> dict[str, str]:
    """The environment that makes a child process write its trace into `raw_dir`."""
    return {"TORCH_TRACE": str(raw_dir)}


# ---------------------------------------------------------------------------- reading a raw trace

def read_records(raw_dir: Path) -> list[tuple[dict[str, Any], str | None]]:
    """(metadata, payload) of every record of every trace file in `raw_dir`, in file order."""
    out: list[tuple[dict[str, Any], str | None]] = []
    for path in sorted(raw_dir.glob("*.log")):
        meta: dict[str, Any] | None = None
        payload: list[str] = []
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("\t"):
                    payload.append(line[1:])
                    continue
                if meta is not None:
                    out.append((meta, "".join(payload) if payload else None))
                meta, payload = None, []
                start = line.find("{")
                if start < 0:
                    continue
                try:
                    meta = json.loads(line[start:])
                except json.JSONDecodeError:
                    meta = None
        if meta is not None:
            out.append((meta, "".join(payload) if payload else None))
    return out


def _kind(meta: dict[str, Any]) -> str:
    skip = {"frame_id", "frame_compile_id", "attempt", "has_payload", "stack", "rank", "compiled_autograd_id",
            "subgraph_name"}
    keys = [k for k in meta if k not in skip]
    kind = keys[0] if keys else "?"
    if kind == "artifact" and isinstance(meta.get("artifact"), dict):
        return f"artifact:{meta['artifact'].get('name', '?')}"
    return kind


def _compile_id(meta: dict[str, Any]) -> str | None:
    return None if meta.get("frame_id") is None else f"{meta['frame_id']}/{meta.get('frame_compile_id', 0)}"


def _json_list(text: str | None) -> list[str]:
    if not text:
        return []
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return [text.strip()[:500]]
    return [str(v)[:500] for v in value] if isinstance(value, list) else [str(value)[:500]]


def break_reason(text: str) -> str:
    """A graph-break record in one line: Dynamo's reason and where in the user's code ("... (at file:line)")."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    where = next((ln[len("Graph break in user code at "):] for ln in lines
                  if ln.startswith("Graph break in user code at ")), "")
    at = next((i for i, ln in enumerate(lines) if ln.startswith("Graph Break Reason:")), None)
    if at is None:
        reason = lines[0] if lines else "?"
    else:  # the headline, then the specifics that follow it (what failed and Dynamo's explanation)
        detail = [ln for ln in lines[at + 1:at + 4] if not ln.startswith(("Hint", "Developer", "For more", "User code"))]
        reason = " ".join([lines[at][len("Graph Break Reason:"):].strip()] + detail[:2])
    return (f"{reason} (at {where})" if where else reason)[:500]


def summarise(records: list[tuple[dict[str, Any], str | None]]) -> dict[str, Any]:
    """One entry per compile: what it compiled, how it ended, what it cost, why it (re)compiled or broke."""
    strings: dict[int, str] = {}
    compiles: dict[str, dict[str, Any]] = {}
    payload_bytes = 0
    for meta, payload in records:
        payload_bytes += len(payload or "")
        kind = _kind(meta)
        if kind == "str" and isinstance(meta.get("str"), list) and len(meta["str"]) == 2:
            strings[int(meta["str"][1])] = str(meta["str"][0])
            continue
        cid = _compile_id(meta)
        if cid is None:
            continue
        entry = compiles.setdefault(cid, {"id": cid, "recompile_reasons": [], "graph_breaks": []})
        if kind == "dynamo_start":
            stack = meta["dynamo_start"].get("stack") or []
            if stack:
                top = stack[-1]
                entry["function"] = top.get("name")
                where = strings.get(top.get("filename"), str(top.get("filename")))
                entry["where"] = f"{where}:{top.get('line')}"
        elif kind == "compilation_metrics":
            m = meta["compilation_metrics"]
            entry["metrics"] = {k: m[k] for k in METRIC_FIELDS if m.get(k) not in (None, [], "")}
        elif kind == "artifact:recompile_reasons":
            entry["recompile_reasons"] += _json_list(payload)
        elif kind in ("dynamo_graph_break_reason", "artifact:dynamo_graph_break_reason"):
            body = found if isinstance(found := (meta or {}).get(kind), dict) else {}
            entry["graph_breaks"].append(break_reason(str(body.get("reason") or payload or "?")))
        elif kind in ("inductor_output_code", "dynamo_output_graph"):
            entry.setdefault("payload_bytes", {})[kind] = len(payload or "")
    out = []
    for cid, entry in compiles.items():
        m = entry.get("metrics", {})
        if m.get("fail_type"):
            status = "failed"
        elif entry["graph_breaks"]:
            status = "break"
        elif m.get("restart_reasons"):
            status = "restarted"
        else:
            status = "ok" if m else "unfinished"
        entry["status"] = status
        entry.setdefault("function", m.get("co_name"))
        if "where" not in entry and m.get("co_filename"):
            entry["where"] = f"{m['co_filename']}:{m.get('co_firstlineno')}"
        out.append(entry)
    out.sort(key=lambda e: tuple(int(x) for x in e["id"].split("/")))
    return {"per_compile": out, "records": len(records), "payload_bytes": payload_bytes,
            "recompile_count": sum(1 for e in out if not e["id"].endswith("/0")),
            "failed_count": sum(1 for e in out if e["status"] == "failed"),
            "graph_break_count": sum(len(e["graph_breaks"]) for e in out)}


def _metadata_lines(records: list[tuple[dict[str, Any], str | None]]) -> bytes:
    lines = []
    for meta, payload in records:
        kind = _kind(meta)
        if kind in NOISE:
            continue
        row = dict(meta)
        if kind == "compilation_metrics" and isinstance(row.get(kind), dict):
            row[kind] = {k: v for k, v in row[kind].items() if k in METRIC_FIELDS or k == "compile_id"}
        for key, value in list(row.items()):  # shapes of every graph input and the like: a size, not the content
            text = json.dumps(value, default=str)
            if len(text) > MAX_SMALL_PAYLOAD:
                row[key] = f"<{len(text):,} characters dropped>"
        name = kind.split(":", 1)[-1]
        if payload and (name in KEPT_PAYLOADS or kind in KEPT_PAYLOADS) and len(payload) <= MAX_SMALL_PAYLOAD:
            row["payload"] = payload
        lines.append(json.dumps(row, default=str))
    return gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0)


# ---------------------------------------------------------------------------- storing

def _prune(folder: Path, max_bytes: int, max_file: int) -> tuple[list[str], list[str]]:
    """Keep tlparse's most useful small files within the caps; delete the rest. (kept, dropped) paths."""
    files = [p for p in folder.rglob("*") if p.is_file()]

    def rank(p: Path) -> tuple[int, int]:
        rel = p.relative_to(folder).as_posix()
        if rel in TLPARSE_FIRST:
            return 0, TLPARSE_FIRST.index(rel)
        if any(p.name.startswith(n) for n in TLPARSE_NEXT):
            return 1, p.stat().st_size
        return 2, p.stat().st_size

    kept, dropped, total = [], [], 0
    for p in sorted(files, key=rank):
        size = p.stat().st_size
        rel = p.relative_to(folder).as_posix()
        if size <= max_file and total + size <= max_bytes:
            kept.append(rel)
            total += size
        else:
            dropped.append(f"{rel} ({size:,} B)")
            p.unlink()
    for d in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(d.iterdir()):
            d.rmdir()
    return kept, dropped


def run_tlparse(raw_dir: Path, dest: Path, timeout_s: float = 120) -> dict[str, Any]:
    """tlparse's HTML of the raw trace into dest/tlparse, pruned; {"ran", "kept", "dropped", "error"}."""
    exe = tlparse_path()
    if exe is None:
        return {"ran": False, "error": "tlparse is not on PATH"}
    logs = sorted(raw_dir.glob("*.log"))
    if not logs:
        return {"ran": False, "error": "no trace file was written"}
    out = dest / "tlparse"
    try:
        proc = subprocess.run([exe, str(logs[0]), "-o", str(out), "--overwrite", "--no-browser"],
                              capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(out, ignore_errors=True)
        return {"ran": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    if proc.returncode != 0 or not (out / "index.html").exists():
        shutil.rmtree(out, ignore_errors=True)
        return {"ran": False, "error": f"tlparse exit status {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    kept, dropped = _prune(out, MAX_TLPARSE_BYTES, MAX_TLPARSE_FILE_BYTES)
    return {"ran": True, "kept": kept, "dropped": dropped, "files_in_trace": len(logs)}


def store(raw_dir: Path, dest: Path, item: str) -> dict[str, Any]:
    """Keep the small part of the raw trace under dest; returns the summary (also in dest/summary.json).
    tlparse's pages are kept while the experiment's traces stay under MAX_EXPERIMENT_BYTES."""
    import torch

    records = read_records(raw_dir)
    dest.mkdir(parents=True, exist_ok=True)
    summary = {"item": item, "torch": torch.__version__, "raw_bytes": sum(p.stat().st_size for p in
                                                                           raw_dir.glob("*.log")),
               **summarise(records)}
    used = sum(p.stat().st_size for p in dest.parent.rglob("*") if p.is_file())  # dest.parent exists (mkdir)
    summary["tlparse"] = run_tlparse(raw_dir, dest) if used < MAX_EXPERIMENT_BYTES else {
        "ran": False, "error": f"this experiment's traces already hold {used:,} B (cap {MAX_EXPERIMENT_BYTES:,} B): "
                               "the summary is kept, tlparse's pages are not"}
    write_bytes_atomic(dest / "metadata.jsonl.gz", _metadata_lines(records))
    write_bytes_atomic(dest / "summary.json", json.dumps(summary, indent=1, default=str).encode("utf-8"))
    return summary


# ---------------------------------------------------------------------------- an experiment's side

def trace_dir(ctx: Any, item: str) -> Path | None:
    """Where an item's trace goes in the run directory (None outside a run: nothing is kept)."""
    out_dir = getattr(ctx, "out_dir", None)
    return None if out_dir is None else Path(out_dir) / TRACES_DIR / ctx.spec.id / slug(item)


def no_link_below(root: Path, path: Path) -> None:
    """OSError when a folder between `root` and `path` (`path` included) is a symbolic link: a trace is written
    only into the run folder itself, never through a link someone left in it."""
    cur = root
    for part in path.relative_to(root).parts:
        cur = cur / part
        if cur.is_symlink():
            raise OSError(errno.ELOOP, "a symbolic link in the run folder; the trace is not written through it",
                          str(cur))


def register(ctx: Any, item: str, dest: Path, summary: dict[str, Any]) -> None:
    """List the stored trace in the record's notes (compile_traces) and say once if tlparse was missing."""
    traces = ctx.record.notes.setdefault("compile_traces", {})
    traces[item] = {"path": dest.relative_to(Path(ctx.out_dir)).as_posix(), "compile_count": len(summary["per_compile"]),
                    "recompile_count": summary["recompile_count"], "failed_count": summary["failed_count"],
                    "graph_break_count": summary["graph_break_count"], "tlparse": bool(summary["tlparse"].get("ran"))}
    missing = tlparse_path() is None
    if missing and not any(s.code == Code.NO_TLPARSE for s in ctx.record.skipped):
        ctx.skip("compile trace HTML (tlparse)", Code.NO_TLPARSE,
                 f"{summary['tlparse'].get('error')}: `pip install tlparse` (a py3-none manylinux x86_64 wheel) "
                 "to get its pages beside the structured-trace summary the report renders")


@contextlib.contextmanager
def traced(ctx: Any, item: str, enabled: bool = True) -> Iterator[None]:
    """Record the structured trace of what compiles inside the block as the run's trace of `item`."""
    dest = trace_dir(ctx, item) if enabled else None
    if dest is None:
        yield
        return
    raw = Path(tempfile.mkdtemp(prefix="lab-trace-"))
    try:
        with tracing(raw):
            yield
    finally:
        keep(ctx, item, raw)


def keep(ctx: Any, item: str, raw: Path) -> None:
    """Store a raw trace folder (from `traced` or a child's TORCH_TRACE) for `item`, then delete the folder.
    A trace that cannot be stored is a note, never a failure of the experiment."""
    dest = trace_dir(ctx, item)
    try:
        if dest is not None and any(raw.glob("*.log")):
            no_link_below(Path(ctx.out_dir), dest / "tlparse")
            register(ctx, item, dest, store(raw, dest, item))
    except Exception as exc:  # the measurement stands without its trace
        ctx.record.notes.setdefault("compile_trace_errors", {})[item] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        shutil.rmtree(raw, ignore_errors=True)
