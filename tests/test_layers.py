"""The wings' layering, checked with ast: no module of lab/ or report/ imports upward, none is in an import cycle.

The order is the one declared for import-linter in pyproject.toml (`[tool.importlinter]`), read from there, so
it is written once; this test holds it where import-linter is not installed. It also sees what import-linter does
not: a module imported by name at run time (`importlib.import_module`, `__import__`), followed as an import where
the name is a literal or an f-string with a literal prefix (f"lab.commands.{name}": lab.commands); a name computed
otherwise is allowed only in a loader declared below, with what it loads. The rule for a child process's target
(lab.run.childproc: `module:function`, imported in the child): a function of its caller's wing or one below it.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from lab.contract.catalogue import CATALOGUE

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
LAYERS: list[list[str]] = next([[n.strip() for n in layer.split("|")] for layer in c["layers"]]
                               for c in CONFIG["contracts"] if c["type"] == "layers")
# The modules that import a module whose name they compute, and the packages it comes from (their edges in the
# graph): the runner loads the experiment it runs by the catalogue's data (ExperimentSpec.module); a child imports
# its caller's target (checked at each run_child call below); `lab diagnose TARGET` imports the user's function.
LOADERS: dict[str, tuple[str, ...]] = {"lab.run.context": ("lab.experiments",), "lab.run.childproc": (),
                                       "lab.measure.diagnose": ()}
# The one upward import the layers allow, at run time: lab.run runs the experiments, which import its Context, and
# knows them by name only.
AT_RUN_TIME = {"lab.run.context -> lab.experiments"}
REPORT = next(c for c in CONFIG["contracts"] if c["type"] == "forbidden" and c["source_modules"] == ["report"])


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def called(node: ast.AST) -> str | None:
    """The name a call calls (`f(..)`, `a.b.f(..)`: f), or None."""
    func = node.func if isinstance(node, ast.Call) else None
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def loaded(tree: ast.AST) -> tuple[set[str], int]:
    """The modules `tree` imports by name at run time (`import_module`, `__import__`): a literal name, or an
    f-string's literal prefix to its last dot; and how many such calls compute their name otherwise."""
    names, computed = set(), 0
    for node in ast.walk(tree):
        if called(node) not in ("import_module", "__import__") or not node.args:
            continue
        arg = node.args[0]
        head = arg.values[0] if isinstance(arg, ast.JoinedStr) and arg.values else None
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            names.add(arg.value)
        elif isinstance(head, ast.Constant) and "." in str(head.value):
            names.add(str(head.value).rpartition(".")[0])
        else:
            computed += 1
    return names, computed


def imports(path: Path, root: Path, top_level_only: bool = False, known: set[str] | None = None) -> set[str]:
    """The modules `path` imports (relative imports resolved), at run time by name too; with `top_level_only`,
    those at module scope. `from pkg import sub` imports the module pkg.sub where `known` has it, else pkg (a name
    defined there)."""
    tree = ast.parse(path.read_text(), str(path))
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set() if top_level_only else loaded(tree)[0] | set(LOADERS.get(name, ()))
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if known is not None and sub in known else base)
    return found


def graph(root: Path, packages: tuple[str, ...] = ("lab", "report"), top_level_only: bool = False
          ) -> dict[str, set[str]]:
    """Every module under `packages` and the modules of those packages it imports."""
    paths = [p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))]
    known = {module_name(p, root) for p in paths}
    return {module_name(p, root): {m for m in imports(p, root, top_level_only, known) if m in known}
            - {module_name(p, root)} for p in paths}


def layer_of(module: str, layers: list[list[str]]) -> tuple[int, str] | None:
    for i, names in enumerate(layers):
        for n in names:
            if module == n or module.startswith(n + "."):
                return i, n
    return None


def upward(deps: dict[str, set[str]], layers: list[list[str]]) -> list[str]:
    """`a -> b` for every import of a higher layer, or of an independent sibling (measure | host)."""
    bad = []
    for a, targets in sorted(deps.items()):
        la = layer_of(a, layers)
        for b in sorted(targets):
            lb = layer_of(b, layers)
            if la is None or lb is None:
                continue
            if lb[0] < la[0] or (lb[0] == la[0] and lb[1] != la[1]):
                bad.append(f"{a} -> {b}")
    return bad


def cycles(deps: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in deps.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(deps):
        if v not in index:
            visit(v)
    return out


def test_the_layers_are_read_from_pyproject() -> None:
    assert [names[0] for names in LAYERS[:6]] == ["lab.commands", "lab.fleet", "lab.containers", "lab.experiments",
                                                  "lab.run", "lab.step"]
    assert ["lab.measure", "lab.host"] in LAYERS and LAYERS.index(["lab.measure", "lab.host"]) < \
        next(i for i, names in enumerate(LAYERS) if names == ["lab.contract"])


def test_no_module_imports_a_wing_above_its_own() -> None:
    deps = graph(ROOT)
    assert len(deps) > 140  # the walk sees the tree
    found = upward(deps, LAYERS)
    assert set(found) >= AT_RUN_TIME  # the load of an experiment is seen
    assert set(found) <= AT_RUN_TIME, "upward imports (the order is in pyproject.toml):\n" + "\n".join(found)
    assert "lab.commands" in deps["lab.__main__"]  # f"lab.commands.{name}"


def test_only_a_declared_loader_imports_a_module_by_a_computed_name() -> None:
    computed = {module_name(p, ROOT): loaded(ast.parse(p.read_text()))[1]
                for pkg in ("lab", "report") for p in (ROOT / pkg).rglob("*.py")}
    assert {m for m, n in computed.items() if n} == set(LOADERS)
    assert all(spec.module == f"{LOADERS['lab.run.context'][0]}.{spec.id}" for spec in CATALOGUE)


def child_targets(root: Path) -> list[tuple[str, str | None]]:
    """(caller, target module) of every run_child call of lab/: its target a literal `module:function`, or a
    module-level constant holding one (None: named otherwise)."""
    out = []
    for path in sorted((root / "lab").rglob("*.py")):
        tree = ast.parse(path.read_text())
        constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                     if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
        for node in ast.walk(tree):
            if called(node) == "run_child":
                arg = node.args[0]
                text = arg.value if isinstance(arg, ast.Constant) else constants.get(getattr(arg, "id", ""))
                out.append((module_name(path, root), text.partition(":")[0] if isinstance(text, str) else None))
    return out


def test_a_child_process_runs_a_function_of_its_callers_wing_or_below() -> None:
    targets = child_targets(ROOT)
    assert len(targets) >= 6 and all(t is not None for _, t in targets), targets
    bad = upward({caller: {t} for caller, t in targets if t is not None}, LAYERS)
    assert not bad, bad
    assert upward({"lab.step.x": {"lab.experiments.y"}}, LAYERS)  # what a target above its caller would be


def test_the_report_imports_only_the_contract_wing_and_labs_utilities() -> None:
    deps = graph(ROOT)
    paths = sorted((ROOT / "report").rglob("*.py"))
    external = {m.split(".")[0] for p in paths for m in imports(p, ROOT)}
    assert "torch" not in external
    forbidden = REPORT["forbidden_modules"]
    bad = [f"{a} -> {b}" for a, targets in deps.items() if a.startswith("report") for b in targets
           if any(b == f or b.startswith(f + ".") for f in forbidden)]
    assert not bad, bad


def test_there_is_no_import_cycle() -> None:
    """Counting imports inside functions too: a cycle hidden in a function is still two modules that need
    each other."""
    found = cycles(graph(ROOT))
    assert not found, found


@pytest.mark.parametrize("top_level_only", [True, False])
def test_the_checks_find_an_upward_import_and_a_cycle(tmp_path: Path, top_level_only: bool) -> None:
    lab = tmp_path / "lab"
    for wing in ("run", "step", "measure", "host"):
        (lab / wing).mkdir(parents=True)
        (lab / wing / "__init__.py").write_text("")
    (lab / "__init__.py").write_text("")
    (lab / "step" / "a.py").write_text("from lab.run import b\n")  # upward: step imports run
    (lab / "run" / "b.py").write_text("import lab.step.a\n")  # and back: a cycle
    (lab / "measure" / "c.py").write_text("def f():\n    from lab.host import d\n")  # siblings are independent
    (lab / "host" / "d.py").write_text("from ..step import a\n")  # relative and upward
    (lab / "host" / "e.py").write_text("import importlib\ndef f(x):\n    importlib.import_module('lab.step.a')\n"
                                        "    __import__(f'lab.run.{x}')\n    importlib.import_module(x)\n")
    deps = graph(tmp_path, ("lab",), top_level_only)
    layers = [["lab.run"], ["lab.step"], ["lab.measure", "lab.host"]]
    found = upward(deps, layers)
    assert "lab.step.a -> lab.run.b" in found and "lab.host.d -> lab.step.a" in found
    assert ("lab.measure.c -> lab.host.d" in found) is not top_level_only
    assert ({"lab.host.e -> lab.run", "lab.host.e -> lab.step.a"} <= set(found)) is not top_level_only
    assert loaded(ast.parse((lab / "host" / "e.py").read_text()))[1] == 1  # a computed name: counted
    assert cycles(deps) == [["lab.run.b", "lab.step.a"]]
