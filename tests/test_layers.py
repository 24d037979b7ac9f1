"""The wings' layering, checked with ast: no module of lab/ or report/ imports upward, none is in an import cycle.

The order is the one declared for import-linter in pyproject.toml (`[tool.importlinter]`), read from there, so
it is written once; this test holds it where import-linter is not installed.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
LAYERS: list[list[str]] = next([[n.strip() for n in layer.split("|")] for layer in c["layers"]]
                               for c in CONFIG["contracts"] if c["type"] == "layers")
REPORT = next(c for c in CONFIG["contracts"] if c["type"] == "forbidden" and c["source_modules"] == ["report"])


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path, top_level_only: bool = False, known: set[str] | None = None) -> set[str]:
    """The modules `path` imports (relative imports resolved); with `top_level_only`, those at module scope.
    `from pkg import sub` imports the module pkg.sub where `known` has it, else pkg (a name defined there)."""
    tree = ast.parse(path.read_text(), str(path))
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
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
    assert not upward(deps, LAYERS), "upward imports (the order is in pyproject.toml):\n" + \
        "\n".join(upward(deps, LAYERS))


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
    deps = graph(tmp_path, ("lab",), top_level_only)
    layers = [["lab.run"], ["lab.step"], ["lab.measure", "lab.host"]]
    found = upward(deps, layers)
    assert "lab.step.a -> lab.run.b" in found and "lab.host.d -> lab.step.a" in found
    assert ("lab.measure.c -> lab.host.d" in found) is not top_level_only
    assert cycles(deps) == [["lab.run.b", "lab.step.a"]]
