"""Names in one place: declared metrics, the catalogue's lists of them, the recorder's refusals, method names."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from lab.contract import metrics as M
from lab.contract import profiles, units
from lab.contract.catalogue import BY_ID, CATALOGUE
from lab.run.manifest import REPO_ROOT
from lab.contract.metrics import REGISTRY, Direction, Kind, MetricSpec
from lab.contract.names import BASELINES, METHOD_ORDER, Family, Method, Variant, family, method_rank
from lab.contract.reasons import Code
from lab.contract.results import Record, load
from lab.run.context import Context

FIXTURE = Path(__file__).parent / "fixtures" / "report_runs" / "cpu-smoke"
UNITS = {v for k, v in vars(units).items() if k.isupper()}
CODES = {c.value for c in Code}


def produced() -> dict[str, set[str]]:
    """Metric name -> the experiments whose catalogue entry declares it."""
    out: dict[str, set[str]] = {}
    for spec in CATALOGUE:
        for m in spec.metrics:
            out.setdefault(m.name, set()).add(spec.id)
    return out


def metric_references(path: Path) -> set[str]:
    """The declared metrics a module names through lab.contract.metrics (`M.STEP_MS`, `from lab.contract.metrics import STEP_MS`)."""
    tree = ast.parse(path.read_text())
    aliases, direct = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "lab.contract":
            aliases |= {a.asname or a.name for a in node.names if a.name == "metrics"}
        elif isinstance(node, ast.ImportFrom) and node.module == "lab.contract.metrics":
            direct |= {a.asname or a.name for a in node.names}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            found.add(node.attr)
        elif isinstance(node, ast.Name) and node.id in direct:
            found.add(node.id)
    return {getattr(M, n).name for n in found if isinstance(getattr(M, n, None), MetricSpec)}


def test_declarations_are_complete_and_consistent() -> None:
    assert len(REGISTRY) >= 90
    for name, spec in REGISTRY.items():
        assert spec.name == name and spec.help and spec.unit in UNITS, spec
        assert getattr(M, name.upper()) is spec, f"lab.contract.metrics.{name.upper()} should be the spec of {name!r}"
        if spec.kind in (Kind.BOOL, Kind.TEXT):
            assert spec.direction is Direction.NONE, f"{name}: a {spec.kind.value} has no better or worse"
        for rule in spec.comparable:
            kind, _, what = rule.partition(":")
            assert kind in ("metric", "manifest", "profile", "option") and what, rule
            if kind == "option":
                assert what.partition(".")[0] in BY_ID and what.partition(".")[2], rule
            if kind == "metric":
                assert what in REGISTRY, rule
    with pytest.raises(ValueError, match="declared twice"):
        M.declare("step_ms", units.MS, Direction.LOWER, "again")


def test_directions_that_are_easy_to_get_wrong() -> None:
    higher = (M.SAVING_MS_PER_CALL, M.SAVING_MS_PER_STEP, M.US_PER_OP_REMOVED, M.SPEEDUP, M.SPEEDUP_VS_EAGER,
              M.TOKEN_AGREEMENT, M.BANDWIDTH_GBPS, M.ACHIEVED_TFLOPS)
    lower = (M.MEASURED_OVER_BOUND, M.BREAK_EVEN_CALLS, M.BREAK_EVEN_STEPS, M.STEP_MS, M.SETUP_S, M.MAX_LOGIT_DIFF,
             M.GRAPH_BREAKS, M.RECOMPILES_DURING_TIMING)
    neither = (M.KERNELS, M.KERNELS_PER_STEP, M.BYTES_MOVED, M.CEILING_X, M.PREDICTED_SPEEDUP, M.WEIGHTS_MIB,
               M.BINDING, M.WINNER, M.TOKENS_EQUAL, M.ROUND_MEDIANS_MS)
    assert all(s.direction is Direction.HIGHER for s in higher)
    assert all(s.direction is Direction.LOWER for s in lower)
    assert all(s.direction is Direction.NONE for s in neither)
    assert M.STEP_MS.comparable[0] == "metric:bytes_moved" and M.ROUND_MEDIANS_MS.kind is Kind.NUMBERS
    assert "manifest:compile_cache.state" in M.SETUP_S.comparable and "profile:model" in M.STEP_MS.comparable


def test_every_catalogue_metric_is_declared_and_every_declaration_is_used() -> None:
    for spec in CATALOGUE:
        assert len(set(spec.metrics)) == len(spec.metrics), spec.id
        for m in spec.metrics:
            assert REGISTRY.get(m.name) is m, (spec.id, m)
    unused = set(REGISTRY) - set(produced())
    assert not unused, f"declared but produced by no experiment: {sorted(unused)}"


def test_every_metric_the_report_uses_is_produced_by_an_experiment() -> None:
    files = sorted((REPO_ROOT / "report").rglob("*.py"))
    used = {str(f.relative_to(REPO_ROOT)): metric_references(f) for f in files}
    assert set().union(*used.values()) >= {"step_ms", "bound_ms", "binding", "setup_s", "first_call_s", "tokens_equal",
                                           "mbu", "break_even_steps", "predicted_speedup_launch"}
    made = produced()
    for file, names in used.items():
        assert names <= set(made), f"{file} uses metrics no experiment produces: {sorted(names - set(made))}"


def test_report_and_compare_spell_no_metric_or_method_name_themselves() -> None:
    """A metric or method name written as a string in report/ or compare is a second place for it."""
    ids = set(BY_ID)
    names = (set(REGISTRY) | set(METHOD_ORDER) | {v.value for v in Variant}) - ids  # ids double as names
    for path in sorted((REPO_ROOT / "report").rglob("*.py")) + [REPO_ROOT / "lab" / "contract" / "marks.py"]:
        tree = ast.parse(path.read_text())
        not_names = set()  # a CSS class (cls="speedup"), a substring test ("speedup" in name), a table's header
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "cls":
                not_names.add(id(node.value))
            elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In):
                not_names.add(id(node.left))
            elif isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["header"] \
                    and isinstance(node.value, ast.List):
                not_names.update(id(e) for e in node.value.elts)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in not_names:
                assert node.value not in names, f"{path.name}:{node.lineno}: {node.value!r} (use lab.contract.metrics/names)"


def test_recorded_metrics_of_the_smoke_fixture_are_declared_for_their_experiment() -> None:
    """The committed smoke run (made by this code): every metric is in its experiment's catalogue entry, with
    the declared unit and a value of the declared kind; every reason code is a declared one."""
    results = load(FIXTURE)
    assert [r.id for r in results.experiments] == [s.id for s in CATALOGUE if not s.by_name]  # smoke's whole run
    assert not [r.id for r in results.experiments if r.reason and r.reason.code == Code.NOT_IMPLEMENTED]
    seen = set()
    for rec in results.experiments:
        declared = {m.name: m for m in BY_ID[rec.id].metrics}
        for m in rec.metrics:
            spec = declared.get(m.name)
            assert spec is not None, f"{rec.id} recorded undeclared {m.name}"
            assert m.unit == spec.unit and (spec.accepts(m.value) or m.value == "nan"), (rec.id, m)
            seen.add(m.name)
        for reason in [rec.reason] + list(rec.skipped):
            assert reason is None or reason.code in CODES, (rec.id, reason)
    assert len(seen) > 60  # the CPU half of the lab, at least


def _ctx(exp: str) -> Context:
    rec = Record(id=exp, title="", status="OK")
    return Context(BY_ID[exp], profiles.get("smoke"), None, rec, None, None)


def test_recorder_refuses_undeclared_metrics_and_wrong_kinds() -> None:
    ctx = _ctx("fusion")
    m = ctx.metric(M.SPEEDUP, 2.0, n_ops=4)
    assert (m.name, m.unit, m.params) == ("speedup", "x", {"n_ops": 4})
    assert ctx.timing(M.STEP_MS, [1.0, 3.0, 2.0], method=Method.EAGER).median == 2.0
    assert ctx.record.samples[0].unit == "ms"
    with pytest.raises(ValueError, match="fusion recorded metric 'winner', which its catalogue entry does not"):
        ctx.metric(M.WINNER, "eager")
    with pytest.raises(ValueError, match="'step_ms'"):
        ctx.metric("step_ms", 1.0)  # a bare string is not a declaration
    with pytest.raises(ValueError, match="'speedup' = '2x' \\(str\\): lab/contract/metrics.py declares it number"):
        ctx.metric(M.SPEEDUP, "2x")
    tc = _ctx("toolchain")
    with pytest.raises(ValueError, match="declares it bool"):
        tc.metric(M.CUDA_AVAILABLE, 1)
    cgd = _ctx("cuda_graph_decode")
    cgd.metric(M.ROUND_MEDIANS_MS, [1.0, 2])
    with pytest.raises(ValueError, match="declares it numbers"):
        cgd.metric(M.ROUND_MEDIANS_MS, [1.0, "x"])
    with pytest.raises(ValueError, match="timed metric 'round_medians_ms'"):
        cgd.timing(M.ROUND_MEDIANS_MS, [1.0])
    assert len(ctx.record.metrics) == 2  # nothing refused was recorded


def test_recorder_refuses_a_second_metric_of_the_same_name_and_params() -> None:
    """One figure, one value: a repeat is a bug of the lab, refused naming the experiment, the metric and its params
    (also through `timing` and `speedup`); other params, or another name with the same params, are other figures."""
    ctx = _ctx("fusion")
    ctx.metric(M.SPEEDUP, 2.0, n_ops=4)
    ctx.metric(M.SPEEDUP, 2.0, n_ops=8)
    ctx.metric(M.KERNELS, 2, n_ops=4)
    with pytest.raises(ValueError, match=r"fusion recorded metric 'speedup' with params \{'n_ops': 4\} a second"):
        ctx.metric(M.SPEEDUP, 2.0, n_ops=4)
    ctx.timing(M.STEP_MS, [1.0, 2.0], method=Method.EAGER, n_ops=4)
    with pytest.raises(ValueError, match="'step_ms' with params"):
        ctx.timing(M.STEP_MS, [1.0, 2.0], n_ops=4, method=Method.EAGER)  # the order of params does not matter
    with pytest.raises(ValueError, match="'speedup' with params"):
        ctx.speedup(M.SPEEDUP, [[2.0, 2.0]], [[1.0, 1.0]], n_ops=8)
    assert len(ctx.record.metrics) == 4 and len(ctx.record.samples) == 1  # nothing refused was recorded
    again = Context(BY_ID["fusion"], profiles.get("smoke"), None, ctx.record, None, None)  # a record holding figures
    with pytest.raises(ValueError, match="a second time"):
        again.metric(M.KERNELS, 3, n_ops=4)


def test_an_undeclared_metric_fails_the_record_naming_it(tmp_path: Path, monkeypatch) -> None:
    import lab.experiments.recompiles as rec
    from lab.run import runner

    monkeypatch.setattr(rec, "run", lambda ctx: ctx.metric(M.STEP_MS, 1.0))
    res = runner.run(profiles.get("smoke"), tmp_path, only=["recompiles"])
    r = res.record("recompiles")
    assert r.status == "FAILED" and r.reason.code == Code.EXCEPTION and "'step_ms'" in r.reason.message
    assert json.loads((tmp_path / "results.json").read_text())["experiments"][0]["status"] == "FAILED"


def test_method_names_and_families() -> None:
    assert METHOD_ORDER[:3] == ("eager", "graph", "compile-default")
    assert sorted(["compile+graph", "zzz", "eager", "graph"], key=method_rank) == ["eager", "graph", "compile+graph",
                                                                                  "zzz"]
    assert family(Method.REDUCE_OVERHEAD_STATIC) == Family.COMPILE_GRAPH and family("graph-no-clone") == "graph"
    assert family("compiled") == "compiled"  # a name this lab does not declare keeps its own
    assert set(BASELINES) == {"eager", "allocating"}
    assert json.dumps({"method": Method.COMPILE_GRAPH}) == '{"method": "compile+graph"}'
