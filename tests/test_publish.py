"""Publishing is safe from anyone's run folders (report.site.traces, report.site.files, report.site.sanitise): paths from a
result file stay inside its run folder, links are never followed, tlparse's HTML runs no script, a bad file skips
only its run, and a failed or empty render never destroys the previous site."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from lab.run.manifest import REPO_ROOT
from report import render_site
from report.site import files
from report.site.sanitise import sanitise

from cli_helpers import cli, one_line_error

FIXTURE_RUN = REPO_ROOT / "tests" / "fixtures" / "report_runs" / "cpu-smoke"

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "report_runs" / "cpu-smoke"
TRACE = "traces/model_scaling/tiny-2L"
SUMMARY = {"per_compile": [{"id": "0/0", "function": "step", "where": "model.py:10", "status": "ok",
                            "metrics": {"graph_op_count": 42}, "recompile_reasons": [], "graph_breaks": []}],
           "records": 7, "raw_bytes": 1000, "payload_bytes": 10, "torch": "2.13",
           "tlparse": {"ran": True, "kept": ["index.html"], "dropped": []}}


def make_run(root: Path, name: str = "traced", path: str = TRACE, summary: object = SUMMARY,
             tlparse: str | None = "<html><body><h1>tlparse</h1></body></html>") -> Path:
    """The CPU smoke fixture with one compile trace listed at `path` (and, when `path` is the usual one, kept
    there with `summary` and a tlparse page)."""
    run = root / name
    run.mkdir(parents=True)
    data = json.loads((FIXTURE / "results.json").read_text())
    rec = next(r for r in data["experiments"] if r["id"] == "model_scaling")
    rec["notes"]["compile_traces"] = {"tiny-2L": {"path": path, "compile_count": 1, "recompile_count": 0,
                                                  "graph_break_count": 0, "failed_count": 0, "tlparse": True}}
    (run / "results.json").write_text(json.dumps(data))
    (run / "manifest.json").write_text(json.dumps(data["manifest"]))
    if path == TRACE:
        folder = run / TRACE
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text(summary if isinstance(summary, str) else json.dumps(summary))
        if tlparse is not None:
            (folder / "tlparse").mkdir()
            (folder / "tlparse" / "index.html").write_text(tlparse)
    return run


def good_run(root: Path) -> Path:
    run = root / "good"
    run.mkdir(parents=True)
    for name in ("results.json", "manifest.json"):
        (run / name).write_bytes((FIXTURE / name).read_bytes())
    return run


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_killed_reports_staging_folder_is_removed_by_the_next(tmp_path: Path, capsys, monkeypatch) -> None:
    """Issue 30, B10: `.site-*.staging` folders of killed reports stayed beside --out forever."""
    import time

    from lab.locks import GRACE_S, OWNER_NAME

    left = tmp_path / ".site.abc.staging"  # what a report killed mid-render leaves: its lock file, nobody holding it
    left.mkdir()
    (left / "index.html").write_text("half")
    (left / OWNER_NAME).write_text('{"pid": 1}')
    old = time.time() - GRACE_S - 60
    os.utime(left / OWNER_NAME, (old, old))
    other = tmp_path / ".elsewhere.abc.staging"  # another --out's, and not this report's to judge
    other.mkdir()
    assert cli(capsys, "report", str(good_run(tmp_path / "runs")), "--out", str(tmp_path / "site"))[0] == 0
    assert not left.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".elsewhere.abc.staging", "runs", "site"]


@pytest.mark.slow
def test_a_kept_trace_is_published_and_linked(tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs")
    site = render_site([run], tmp_path / "site")
    page = tmp_path / "site" / "traces" / "traced" / "model_scaling" / "tiny-2L" / "index.html"
    assert site.traces == [page] and "Compile trace: tiny-2L" in page.read_text()
    assert (page.parent / "tlparse" / "index.html").read_text().count("<h1>tlparse</h1>") == 1
    assert 'href="traces/traced/model_scaling/tiny-2L/index.html"' in site.pages[0].read_text()


def test_a_trace_not_kept_gets_no_link(tmp_path: Path) -> None:
    """The committed runs keep no traces: the table lists them without links to pages that do not exist."""
    run = make_run(tmp_path / "runs")
    (run / TRACE / "summary.json").unlink()
    site = render_site([run], tmp_path / "site")
    html = site.pages[0].read_text()
    assert "tiny-2L" in html and 'href="traces/' not in html and not (tmp_path / "site" / "traces").exists()


@pytest.mark.slow
@pytest.mark.parametrize("path, why", [("/etc", "is absolute"), ("../../outside", "leaves the run folder"),
                                       ("traces/../../outside", "leaves the run folder")])
def test_a_trace_path_outside_the_run_folder_skips_the_run(tmp_path: Path, capsys, path: str, why: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "summary.json").write_text(json.dumps(SUMMARY))
    (outside / "secret.txt").write_text("secret")
    runs = tmp_path / "runs"
    bad, good = make_run(runs, path=path), good_run(runs)
    out = tmp_path / "site"
    rc, err = cli(capsys, "report", str(bad), str(good), "--out", str(out))
    assert rc == 0
    line = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(line) == 1 and str(bad / "results.json") in line[0] and why in line[0], err
    assert "compile_traces[tiny-2L].path" in line[0]
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "run-good.html"]
    assert not any(b"secret" in v for v in tree(out).values())
    assert sorted(p.name for p in tmp_path.iterdir() if p.name not in ("runs", "site")) == ["outside"]
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt", "summary.json"]  # nothing written there


@pytest.mark.slow
def test_a_trace_path_through_a_symlink_skips_the_run(tmp_path: Path, capsys) -> None:
    outside = tmp_path / "outside" / "tiny-2L"
    outside.mkdir(parents=True)
    (outside / "summary.json").write_text(json.dumps(SUMMARY))
    run = make_run(tmp_path / "runs", path="traces/model_scaling/tiny-2L")
    link_target = run / "traces" / "model_scaling"
    for p in sorted(link_target.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    link_target.rmdir()
    link_target.symlink_to(outside.parent)
    rc, err = cli(capsys, "report", str(run), str(good_run(tmp_path / "runs")), "--out", str(tmp_path / "site"))
    assert rc == 0 and "is a symbolic link; links are never followed" in err and str(run / "results.json") in err
    assert not (tmp_path / "site" / "traces").exists()


@pytest.mark.slow
def test_symlinks_inside_tlparse_are_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_text("root:secret-hash")
    run = make_run(tmp_path / "runs")
    tl = run / TRACE / "tlparse"
    (tl / "passwd.txt").symlink_to(secret)
    (tl / "etc").symlink_to(tmp_path)
    (tl / "tool.js").write_text("alert(1)")
    render_site([run], tmp_path / "site")
    dest = tmp_path / "site" / "traces" / "traced" / "model_scaling" / "tiny-2L"
    assert sorted(tree(dest)) == ["index.html", "tlparse/index.html"]
    assert not any(b"secret-hash" in v for v in tree(tmp_path / "site").values())
    page = (dest / "index.html").read_text()
    assert "passwd.txt (not a regular file: not copied)" in page and "etc/ (a symbolic link, not followed)" in page
    assert "tool.js (a kind of file the site does not publish)" in page


HOSTILE = """<!doctype html><html><head><meta http-equiv="refresh" content="0;url=javascript:alert(1)">
<base href="http://evil/"><script>alert("a")</script><style>td{color:red}</style ><style>a</style></head>
<body onload="alert(2)"><h1 class="t">Compile <b>report</b> &lt;safe&gt;</h1>
<img src="x" onerror="alert(3)"><a href="javascript:alert(4)">x</a><a href=" JaVa&#x53;cript:alert(5)">y</a>
<a href="compile_0_0/index.html" target="_blank">ok</a><iframe srcdoc="<script>alert(6)</script>"></iframe>
<svg><script>alert(7)</script></svg><p style="background:url(javascript:alert(8))">p</p>
<SCRIPT SRC=//evil/x.js></SCRIPT><object data="x.swf"></object><form action="http://evil"><input name=a></form>
<!-- <script>alert(9)</script> --><table><tr><td colspan="2">cell</td></tr></table></body></html>"""


def test_tlparse_html_is_rebuilt_without_any_script() -> None:
    out = sanitise(HOSTILE)
    low = out.lower()
    for bad in ("<script", "alert", "onload", "onerror", "javascript", "<iframe", "<svg", "<object", "<base",
                "refresh", "<form", "<input", "target=", "evil"):
        assert bad not in low, bad
    assert out.startswith("<!doctype html>\n<meta http-equiv=\"Content-Security-Policy\" content=\"default-src "
                          "'none';")
    assert '<h1 class="t">Compile <b>report</b> &lt;safe&gt;</h1>' in out
    assert '<a href="compile_0_0/index.html">ok</a>' in out and '<td colspan="2">cell</td>' in out
    assert "<style>td{color:red}</style>" in out


def test_a_style_cannot_close_itself_to_open_a_script() -> None:
    out = sanitise("<style>a{}</stylex><script>alert(1)</script></style><p>after</p>")
    assert "<script" not in out and "<p>after</p>" in out


@pytest.mark.slow
def test_a_published_tlparse_page_carries_no_script(tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs", tlparse=HOSTILE)
    render_site([run], tmp_path / "site")
    page = tmp_path / "site" / "traces" / "traced" / "model_scaling" / "tiny-2L" / "tlparse" / "index.html"
    assert "<script" not in page.read_text().lower() and "alert" not in page.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("summary, why", [("{not json", "not a readable JSON summary"),
                                          ([1, 2], "a trace summary is a JSON object, this is a list"),
                                          ({"per_compile": "x"}, "field per_compile is not a list of objects")])
def test_a_malformed_summary_skips_only_its_run(tmp_path: Path, capsys, summary: object, why: str) -> None:
    runs = tmp_path / "runs"
    bad, good = make_run(runs, summary=summary), good_run(runs)
    out = tmp_path / "site"
    rc, err = cli(capsys, "report", str(runs), "--out", str(out))
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert rc == 0 and len(lines) == 1 and "Traceback" not in err and "bug in the lab" not in err
    assert str(bad / TRACE / "summary.json") in lines[0] and why in lines[0], err
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "run-good.html"]  # no half-published traces
    assert str(bad / TRACE / "summary.json") in (out / "index.html").read_text()
    assert good.name in (out / "index.html").read_text()


def test_an_empty_render_leaves_the_previous_site(tmp_path: Path, capsys) -> None:
    out = tmp_path / "site"
    assert cli(capsys, "report", str(good_run(tmp_path / "runs")), "--out", str(out))[0] == 0
    before = tree(out)
    (tmp_path / "empty").mkdir()  # a typo in the run folder, then an empty runs/
    for given in (tmp_path / "typo", tmp_path / "empty"):
        rc, err = cli(capsys, "report", str(given), "--out", str(out))
        last = err.splitlines()[-1]
        assert rc == 2 and last.startswith("error: no run could be rendered") and "is unchanged" in last, err
        assert str(given) in err.splitlines()[0] and "Traceback" not in err
    assert tree(out) == before and "run-good.html" in before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "runs", "site"]  # no staging folder left


@pytest.mark.slow
def test_a_full_disk_leaves_the_previous_site_whole(tmp_path: Path, capsys, monkeypatch) -> None:
    runs = tmp_path / "runs"
    out = tmp_path / "site"
    good = good_run(runs)
    assert cli(capsys, "report", str(good), "--out", str(out))[0] == 0
    before = tree(out)
    calls = []

    def full(handle, data: bytes) -> None:
        calls.append(1)
        if len(calls) == 2:  # the second page: the first is already staged
            handle.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        handle.write(data)

    monkeypatch.setattr(files, "_write_all", full)
    err = one_line_error(capsys, "report", str(good), str(make_run(runs)), "--out", str(out))
    assert "No space left on device" in err and f"--out {out}" in err and "unchanged" in err
    assert tree(out) == before and all(v.rstrip().endswith(b"</html>") for k, v in before.items())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs", "site"]


def test_write_page_never_leaves_half_a_page(tmp_path: Path, monkeypatch) -> None:
    page = tmp_path / "index.html"
    files.write_page(page, "<html>old</html>")

    def full(handle, data: bytes) -> None:
        handle.write(data[:3])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "_write_all", full)
    with pytest.raises(files.WriteError):
        files.write_page(page, "<html>new</html>")
    assert page.read_text() == "<html>old</html>" and [p.name for p in tmp_path.iterdir()] == ["index.html"]


@pytest.mark.slow
def test_an_earlier_reports_pages_are_replaced_and_other_files_kept(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    out = tmp_path / "site"
    traced, good = make_run(runs), good_run(runs)
    assert cli(capsys, "report", str(traced), str(good), "--out", str(out))[0] == 0
    (out / "notes.txt").write_text("mine")
    assert (out / "traces" / "traced").is_dir()
    assert cli(capsys, "report", str(good), "--out", str(out))[0] == 0
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "notes.txt", "run-good.html"]


@pytest.mark.slow
def test_report_into_an_old_folder_leaves_no_stale_pages(tmp_path: Path, capsys) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for run in (a, b):
        run.mkdir()
        (run / "results.json").write_bytes((FIXTURE_RUN / "results.json").read_bytes())
    out = tmp_path / "site"
    (out).mkdir()
    (out / "notes.txt").write_text("mine")
    assert cli(capsys, "report", str(a), str(b), "--out", str(out))[0] == 0
    assert {p.name for p in out.iterdir()} == {"index.html", "compare.html", "history.html", "run-a.html", "run-b.html",
                                                "notes.txt"}
    assert cli(capsys, "report", str(a), "--out", str(out))[0] == 0
    assert {p.name for p in out.iterdir()} == {"index.html", "run-a.html", "notes.txt"}
    assert "run-b.html" not in (out / "index.html").read_text()
