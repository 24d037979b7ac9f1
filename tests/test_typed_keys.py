"""No module outside lab/contract spells an experiment id, a record status or a param name as a string literal:
they ask with lab.contract.names' `Experiment`, `Status` and `Param` (and lab.contract.query), so a renamed id or a
typo is an import-time AttributeError, not a lookup that silently finds nothing.

Scope: ids and statuses anywhere in lab/ (but lab/contract, which declares them) and report/. Param names as
keys (a dict literal's key, a subscript, `.get`/`.pop`/`.setdefault`'s first argument) in lab/experiments, the wing
that records metrics and selects them by their params, and in report/, which reads them; the other wings of lab/
pass params through without naming them, and the words they spell as keys are their own records' fields (a
manifest's "version", an image's "variant", a scheduler's "kind", a compile trace's "function").
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lab.contract.names import Experiment, Param, Status

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("report", "lab")
PARAMS_SCANNED = ("lab/experiments", "report")
UNSCANNED = ("lab/contract",)  # declares the names
_STATUSES = ("OK", "FAILED", "NOT_RUN")
# (literals, files, why those strings are not an experiment id, a status or a param name there)
NOT_KEYS: tuple[tuple[tuple[str, ...], tuple[str, ...], str], ...] = (
    (("inductor",), ("lab/commands/diagnose.py", "lab/containers/probe.py", "lab/experiments/diagnose.py",
                     "lab/experiments/common/methods.py", "lab/experiments/common/sweep.py", "lab/host/compile_cache.py",
                     "lab/host/toolchain.py", "lab/run/manifest.py", "lab/step/methods.py"),
     "torch.compile's backend, the toolchain's need or Dynamo's counter group of that name"),
    (("graph_breaks",), ("report/site/traces.py", "lab/experiments/common/methods.py", "lab/measure/compiletrace.py",
                         "lab/measure/diagnose.py", "lab/step/methods.py"),
     "Dynamo's counter or a compile trace's field, not the experiment"),
    (("recompiles",), ("report/site/traces.py", "lab/measure/diagnose.py", "lab/measure/dynamo_tools.py"),
     "a compile trace's field, diagnose's check or torch's artifact log, not the experiment"),
    (("fusion",), ("lab/experiments/diagnose.py", "lab/measure/diagnose.py"), "diagnose's verdict, not the experiment"),
    (("diagnose",), ("lab/__main__.py", "lab/commands/diagnose.py"), "the subcommand's name"),
    (("toolchain",), ("lab/experiments/common/methods.py", "lab/experiments/common/sweep.py", "lab/run/manifest.py"),
     "Context's attribute, or the manifest's field"),
    (_STATUSES, ("lab/console.py",), "lab.console is below the contract (pyproject.toml's layers): it cannot import it"),
    (_STATUSES, ("lab/containers/base.py", "lab/containers/build.py"),
     "an image build's outcome (lab.containers), not a record's status"),
    (("OK", "FAILED"), ("lab/commands/images.py",), "an image build's outcome"),
    (("OK",), ("lab/commands/base_image.py", "lab/commands/image_check.py"), "an image check's outcome or verdict"),
    (("version",), ("lab/experiments/toolchain.py",), "the compiler's version in the toolchain's compiler note"),
    (("dtype",), ("lab/experiments/manual_graph_recipe.py",), "a wrong input (a tensor of another dtype), not a param"),
    (("dtype",), ("report/sections/steps.py",), "the run profile's field in the manifest"),
    (("version",), ("report/pages/compare_text.py", "report/pages/front.py"), "the manifest's torch version"),
    (("kind",), ("report/pages/compare_text.py",), "a compare mark's kind (metric, status, check)"),
    (("steps",), ("report/draw/charts.py", "report/pages/headline.py"),
     "the run page's section id, or the decode config note's field"),
    (("function",), ("report/sections/fused_kernels.py", "report/site/traces.py"),
     "a kernel row's or a compile trace's field"),
)
EXEMPT = {(f, text) for texts, files, _ in NOT_KEYS for f in files for text in texts}
KEYS = {e.value for e in Experiment} | {s.value for s in Status}
PARAMS = {p.value for p in Param}


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr)}


def _as_keys(tree: ast.AST) -> set[int]:
    """The string constants used as a key: a dict literal's, a subscript's, or .get/.pop/.setdefault's first."""
    keys: list[ast.expr | None] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys += node.keys
        elif isinstance(node, ast.Subscript):
            keys.append(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args \
                and node.func.attr in ("get", "pop", "setdefault"):
            keys.append(node.args[0])
    return {id(k) for k in keys if isinstance(k, ast.Constant)}


def spelled(path: Path, params: bool = False) -> list[tuple[int, str]]:
    """(line, literal) for each string constant of `path` that is an experiment id or a status, or (`params`) a
    declared param name used as a key."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs, keys = _docstrings(tree), _as_keys(tree) if params else set()
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
            and (node.value in KEYS or (id(node) in keys and node.value in PARAMS))]


def _found() -> set[tuple[str, int, str]]:
    out = set()
    for wing in SCANNED:
        for p in sorted((ROOT / wing).rglob("*.py")):
            rel = p.relative_to(ROOT).as_posix()
            if not rel.startswith(UNSCANNED):
                out |= {(rel, line, text) for line, text in spelled(p, rel.startswith(PARAMS_SCANNED))}
    return out


def test_the_scan_sees_a_literal_id_a_status_and_a_param_name(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('"""cuda_graph_decode in a docstring is prose."""\nx = r.status == "OK" or r.id == "ceilings"\n'
                     'y = {"batch": 1, "label": "batch"}, p["method"], p.get("dtype")\n')
    assert sorted(spelled(probe)) == [(2, "OK"), (2, "ceilings")]
    assert sorted(spelled(probe, params=True)) == [(2, "OK"), (2, "ceilings"), (3, "batch"), (3, "dtype"),
                                                   (3, "method")]


def test_the_scan_reads_param_names_in_report_and_lab_experiments_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for rel in ("report/pages/probe.py", "lab/experiments/probe.py", "lab/run/probe.py"):
        (tmp_path / rel).parent.mkdir(parents=True)
        (tmp_path / rel).write_text('x = m.params.get("batch")\n')
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert _found() == {("report/pages/probe.py", 1, "batch"), ("lab/experiments/probe.py", 1, "batch")}

def test_no_module_spells_an_experiment_id_a_status_or_a_param_name() -> None:
    found = _found()
    assert len({f for f, _, _ in found}) > 5 and any(f.startswith("lab/experiments/") for f, _, _ in found)
    bad = sorted(f"{f}:{line}: {text!r}" for f, line, text in found if (f, text) not in EXEMPT)
    assert not bad, "use lab.contract.names.Experiment / Status / Param:\n" + "\n".join(bad)


def test_every_exemption_is_still_needed() -> None:
    used = {(f, text) for f, _, text in _found()}
    assert EXEMPT <= used, sorted(EXEMPT - used)
