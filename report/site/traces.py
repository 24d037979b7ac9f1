"""Publishing a run's compile traces into the site, treating every path and file the run holds as hostile.

A trace is listed in a record's notes (`compile_traces[ITEM].path`, lab.measure.compiletrace) as a folder
relative to the run folder. `trace_source` accepts it only when the path is relative, has no `..`, passes
through no symbolic link and resolves inside the run folder; anything else raises TraceError naming
results.json and the field, and the run is skipped (report.site.build renders each run in isolation). A trace
whose folder or summary.json is simply absent (the committed reference runs keep none) gets no page and no
link. `publish(run, out)` writes a page per trace under `out/traces/<run>/<experiment>/<item>/` from its
summary.json (malformed: TraceError naming the file), and copies tlparse's pages beside it: regular files
only (a symbolic link or anything else is listed as not copied, never followed), of a few harmless kinds,
each HTML page rebuilt by report.site.sanitise. Nothing is written outside `out`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath
from typing import Any

from jinja2 import Environment, select_autoescape

from lab import untrusted
from lab.contract import notes as N
from lab.contract.schema import parse_json

from report.site.sanitise import sanitise
from report.site.files import MARKER, TRACES, write_bytes, write_page

NOTE_TRACES = N.COMPILE_TRACES.key
SUMMARY = "summary.json"
MAX_FILE = 4 << 20  # a tlparse file larger than this is not copied (the lab keeps ~96 KB of them per item)
COPIED = {".html": "html", ".htm": "html", ".css": "raw", ".txt": "raw", ".json": "raw", ".log": "raw",
          ".png": "raw", ".jpg": "raw", ".jpeg": "raw", ".gif": "raw"}


class TraceError(ValueError):
    """A trace the run lists cannot be published safely; the message is one line naming the file."""


def _rel(value: Any, where: str) -> PurePosixPath:
    text = str(value or "")
    p = PurePosixPath(text)
    if not text or "\\" in text or "\x00" in text:
        raise TraceError(f"{where}: {text!r} is not a relative folder path")
    if p.is_absolute() or text.startswith("~") or (len(text) > 1 and text[1] == ":"):
        raise TraceError(f"{where}: {text!r} is absolute; a trace path must stay inside the run folder")
    if ".." in p.parts:
        raise TraceError(f"{where}: {text!r} leaves the run folder (..)")
    return p


def trace_source(run: Any, rid: str, item: str, info: Any) -> Path | None:
    """The trace's folder inside the run folder, or None when it was not kept there. TraceError when the path
    the record gives is unsafe (absolute, `..`, through a symbolic link, resolving outside the folder)."""
    run_dir = Path(run.path).parent
    where = f"{run.path}: experiments[{rid}].notes.{NOTE_TRACES}[{item}].path"
    if not isinstance(info, dict):
        raise TraceError(f"{run.path}: experiments[{rid}].notes.{NOTE_TRACES}[{item}] is not an object")
    rel = _rel(info.get("path"), where)
    cur = run_dir
    for part in rel.parts + (SUMMARY,):
        cur = cur / part
        if cur.is_symlink():
            raise TraceError(f"{where}: {cur} is a symbolic link; links are never followed")
        if not cur.exists():
            return None
    root = run_dir.resolve()
    if not cur.resolve().is_relative_to(root):
        raise TraceError(f"{where}: resolves outside the run folder")
    return cur.parent if cur.is_file() else None


def trace_href(run: Any, info: dict[str, Any]) -> str:
    """Where a trace's page lands in the site: traces/<run>/<experiment>/<item>/ (the run's own path less its
    leading traces/). Only for a path trace_source accepted."""
    rel = PurePosixPath(str(info.get("path", "")))
    if rel.parts and rel.parts[0] == TRACES:
        rel = PurePosixPath(*rel.parts[1:])
    return f"{TRACES}/{run.slug}/{rel.as_posix()}"


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "—"


def read_summary(file: Path) -> dict[str, Any]:
    """summary.json as the trace page needs it; TraceError naming the file when it is not that."""
    try:
        data = parse_json(untrusted.read_text(file, MAX_FILE))
    except (OSError, UnicodeError, ValueError, RecursionError) as exc:
        raise TraceError(f"{file}: not a readable JSON summary ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:200]})") from None
    if not isinstance(data, dict):
        raise TraceError(f"{file}: a trace summary is a JSON object, this is a {type(data).__name__}")
    compiles = data.get("per_compile", [])
    if not isinstance(compiles, list) or not all(isinstance(c, dict) for c in compiles):
        raise TraceError(f"{file}: field per_compile is not a list of objects")
    tl = data.get("tlparse") or {}
    if not isinstance(tl, dict):
        raise TraceError(f"{file}: field tlparse is not an object")
    rows = []
    for c in compiles:
        m = c.get("metrics") if isinstance(c.get("metrics"), dict) else {}
        rows.append({"id": str(c.get("id", "")), "function": str(c.get("function") or ""),
                     "where": str(c.get("where") or ""), "status": str(c.get("status", "")),
                     "graph_ops": str(m.get("graph_op_count", "")), "guards": str(m.get("guard_count", "")),
                     "compile_s": str(m.get("entire_frame_compile_time_s", "")),
                     "backend_s": str(m.get("backend_compile_time_s", "")),
                     "recompiles": "; ".join(map(str, c.get("recompile_reasons") or [])),
                     "breaks": "; ".join(map(str, c.get("graph_breaks") or [])),
                     "failure": f"{m.get('fail_type') or ''} {m.get('fail_reason') or ''}".strip()})
    return {"torch": str(data.get("torch", "—")), "records": _count(data.get("records")),
            "raw_bytes": _count(data.get("raw_bytes")), "payload_bytes": _count(data.get("payload_bytes")),
            "per_compile": rows, "tlparse_ran": bool(tl.get("ran")), "tlparse_error": str(tl.get("error") or ""),
            **{k: [str(x) for x in tl[k]] if isinstance(tl.get(k), list) else [] for k in ("kept", "dropped")}}


def copy_tlparse(src: Path, dest: Path) -> tuple[int, list[str]]:
    """Copy tlparse's regular files of the kinds in COPIED (HTML sanitised); never follow a link.
    (files copied, what was not copied and why)."""
    copied, refused = 0, []
    for folder, dirs, files in os.walk(src, followlinks=False):
        here = Path(folder)
        for d in list(dirs):
            if (here / d).is_symlink():
                refused.append(f"{(here / d).relative_to(src).as_posix()}/ (a symbolic link, not followed)")
                dirs.remove(d)
        for name in sorted(files):
            path = here / name
            rel = path.relative_to(src).as_posix()
            st = path.lstat()
            kind = COPIED.get(path.suffix.lower())
            if not stat.S_ISREG(st.st_mode):
                refused.append(f"{rel} (not a regular file: not copied)")
            elif kind is None:
                refused.append(f"{rel} (a kind of file the site does not publish)")
            elif st.st_size > MAX_FILE:
                refused.append(f"{rel} ({st.st_size:,} B: too large)")
            else:
                try:
                    data = untrusted.read_bytes(path, MAX_FILE)  # replaced since the lstat: still no link followed
                except OSError as exc:
                    refused.append(f"{rel} ({exc.strerror}: not copied)")
                    continue
                if kind == "html":
                    data = sanitise(data.decode("utf-8", errors="replace")).encode("utf-8")
                write_bytes(dest / rel, data)
                copied += 1
    return copied, refused


PAGE = Environment(autoescape=select_autoescape(default=True)).from_string("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Compile trace: {{ item }}</title>
<style>body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d2330}table{border-collapse:collapse;font-size:13px}
th,td{border-bottom:1px solid #d9dee7;padding:4px 10px;text-align:left;vertical-align:top}th{background:#f6f8fb}
.muted{color:#667085}.bad{color:#b42318;font-weight:600}code,pre{font-size:12px}</style></head><body>
<h1>Compile trace: {{ item }}</h1>
<p class="muted">{{ experiment }} · torch {{ s.torch }} · {{ s.records }} trace records, {{ s.raw_bytes }}
bytes raw (graphs and generated code are not kept; {{ s.payload_bytes }} bytes of payloads dropped).
{% if tl %}<a href="tlparse/index.html">tlparse's report</a> (pruned: {{ s.kept|length }} files kept,
{{ s.dropped|length }} dropped; its pages are rebuilt without scripts).{% else %}No tlparse report: {{ s.tlparse_error or "none kept" }}.{% endif %}</p>
<table><thead><tr><th>compile</th><th>function</th><th>where</th><th>status</th><th>graph ops</th><th>guards</th>
<th>whole compile, s</th><th>backend, s</th><th>recompile reasons</th><th>graph breaks</th><th>failure</th></tr></thead><tbody>
{% for c in s.per_compile %}<tr><td>{{ c.id }}</td><td>{{ c.function }}</td><td class="muted">{{ c.where }}</td>
<td{% if c.status != "ok" %} class="bad"{% endif %}>{{ c.status }}</td><td>{{ c.graph_ops }}</td><td>{{ c.guards }}</td>
<td>{{ c.compile_s }}</td><td>{{ c.backend_s }}</td><td>{{ c.recompiles }}</td><td>{{ c.breaks }}</td>
<td>{{ c.failure }}</td></tr>
{% endfor %}</tbody></table>
{% if tl and s.dropped %}<details><summary>tlparse files not kept</summary><pre>{{ s.dropped|join("\\n") }}</pre>
</details>{% endif %}
{% if refused %}<details id="not-copied"><summary>{{ refused|length }} tlparse entries not published</summary><pre>{{ refused|join("\\n") }}</pre>
</details>{% endif %}
<p class="muted">Every record's metadata (payloads dropped) is in metadata.jsonl.gz beside this run's results.</p>
</body></html>""")


def publish(run: Any, out: Path) -> list[Path]:
    """Write a page for every compile trace the run kept (and copy tlparse's pages); returns the pages.
    TraceError (one line naming the file) for a trace that cannot be published safely."""
    pages = []
    for rec in run.results.experiments:
        traces = rec.notes.get(NOTE_TRACES) or {}
        if not isinstance(traces, dict):
            raise TraceError(f"{run.path}: experiments[{rec.id}].notes.{NOTE_TRACES} is not an object")
        for item, info in traces.items():
            src = trace_source(run, rec.id, item, info)
            if src is None:
                continue
            summary = read_summary(src / SUMMARY)
            dest = out / trace_href(run, info)
            tl, refused = src / "tlparse", list[str]()
            shown = summary["tlparse_ran"] and tl.is_dir() and not tl.is_symlink()
            if shown:
                copied, refused = copy_tlparse(tl, dest / "tlparse")
                shown = (dest / "tlparse" / "index.html").is_file()
            write_page(dest / "index.html", PAGE.render(item=item, experiment=rec.id, s=summary, tl=shown,
                                                        refused=refused))
            pages.append(dest / "index.html")
    if pages:
        write_page(out / TRACES / MARKER, "pages under this folder are written by `lab report`\n")
    return pages
