"""Imports go one way, floor by floor (DEVELOPERS.md "Architecture"; docs/architecture.md
"Floors").

    floor  name          modules
    0      foundation    decobench (the package root), .errors, .atomicio, .registry
    1      netem         decobench.netem.*            traces, links, shaping
    2      clock         decobench.clock.*            the time model
    3      planning      decobench.planning.*         estimators, Φ, Algorithm 1
    4      compression   decobench.compression.*      compressors, error feedback, codecs
    5      methods       decobench.methods.*          DD-EF-SGD, DeCo-SGD, the registry
    6      tasks         decobench.tasks.*            models and data
    7      training      decobench.training.*         the one loop and what it needs
    8      runs          decobench.runs.*             config, run directory, the simulated run
    9      emulated      decobench.emulated.*         the emulated backend
    10     sweeps        decobench.sweeps.*           suites, cells, executors, the sweep
    -      plugins       decobench.baselines.*        methods: may import floors 0-5
    -      reports       decobench.reports.*          may import floors 0-8
    -      front ends    decobench.cli.*, decobench.library, decobench.emulated.entry
                         (+ __main__): may import anything; nothing imports them

A module imports only its own floor and the floors below it; plugins and reports import the
floors named above and never each other. Every import statement counts, also those inside
functions and under ``TYPE_CHECKING``, so a lazy import cannot hide a wrong-way dependency;
and no two modules import each other through any path (no cycle, within a floor too).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"benchmark": "decobench", "baselines": "decobench.baselines",
           "netem": "decobench.netem", "reports": "decobench.reports"}
FOUNDATION = {"decobench", "decobench.errors", "decobench.atomicio", "decobench.registry"}
FLOORS = ("foundation", "netem", "clock", "planning", "compression", "methods", "tasks",
          "training", "runs", "emulated", "sweeps")
"""The core's floors, lowest first: the names of benchmark/'s subpackages (and netem)."""
FRONT_ENDS = {"decobench.library", "decobench.emulated.entry", "decobench.emulated.__main__"}
FRONT_END_PACKAGES = ("decobench.cli",)
ALLOWED_BELOW = {"plugins": FLOORS[: FLOORS.index("methods") + 1],
                 "reports": FLOORS[: FLOORS.index("runs") + 1]}
OLD_TOP_LEVEL = {"benchmark", "baselines", "netem", "reports"}


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def _imports(path: Path, module: str) -> set[str]:
    """Absolute names of every decobench module ``path`` imports (relative imports resolved)."""
    names = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _layer(module: str) -> str:
    """The module's floor (a name of :data:`FLOORS`), or plugins, reports or front end."""
    if module in FOUNDATION:
        return "foundation"
    if module in FRONT_ENDS or any(_in(module, p) for p in FRONT_END_PACKAGES):
        return "front end"
    for prefix, layer in (("decobench.baselines", "plugins"), ("decobench.reports", "reports"),
                          ("decobench.netem", "netem")):
        if _in(module, prefix):
            return layer
    for floor in FLOORS:
        if _in(module, f"decobench.{floor}"):
            return floor
    return "unplaced"


def _allowed(layer: str) -> set[str]:
    if layer == "front end":
        return {*FLOORS, "plugins", "reports", "front end"}
    if layer in ALLOWED_BELOW:
        return {*ALLOWED_BELOW[layer], layer}
    return set(FLOORS[: FLOORS.index(layer) + 1])


MODULES = _modules()


def _known(name: str) -> str | None:
    """The decobench module ``name`` refers to (a module, or a name inside one)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _edges() -> dict[str, set[str]]:
    """Module -> the decobench modules it imports (packages count as their ``__init__``)."""
    edges = {}
    for module, path in MODULES.items():
        targets = {_known(n) for n in _imports(path, module) if n.split(".")[0] == "decobench"}
        edges[module] = {t for t in targets if t is not None and t != module}
    return edges


EDGES = _edges()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_one_way(module):
    layer = _layer(module)
    assert layer != "unplaced", (
        f"{module} sits on no floor: put it in one of benchmark/'s subpackages "
        f"({', '.join(FLOORS[2:])}) or list it as a front end (docs/architecture.md)")
    for name in sorted(_imports(MODULES[module], module)):
        assert name.split(".")[0] not in OLD_TOP_LEVEL, (
            f"{module} imports {name}: the package is decobench (decobench.{name} or, for "
            "the core, decobench.<floor>.<module>)")
    wrong = [f"{t} ({_layer(t)})" for t in sorted(EDGES[module])
             if _layer(t) not in _allowed(layer)]
    assert not wrong, f"{module} ({layer}) imports the wrong way: {', '.join(wrong)}"


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(EDGES):
        if root in index:
            continue
        work = [(root, iter(sorted(EDGES[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(EDGES[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_itself_through_others():
    assert _cycles() == []


def test_the_cycle_check_sees_a_cycle(monkeypatch):
    """The check itself: two modules that import each other are one component."""
    assert "decobench.clock.topology" in EDGES["decobench.clock.timemodel"]
    monkeypatch.setitem(EDGES, "decobench.clock.topology",
                        {*EDGES["decobench.clock.topology"], "decobench.clock.timemodel"})
    assert ["decobench.clock.timemodel", "decobench.clock.topology"] in _cycles()


@pytest.mark.parametrize("floor", [*FLOORS[2:], "cli"])
def test_each_floor_says_what_lives_there_and_what_it_may_import(floor):
    init = ROOT / "benchmark" / floor / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    assert "May import" in doc and len(doc.split()) > 25, (
        f"benchmark/{floor}/__init__.py: a paragraph on what lives there, and a "
        "'May import: ...' line naming the floors below it")


def test_only_the_foundation_and_the_front_ends_sit_at_the_root():
    root = {m for m in MODULES if m.count(".") == 1 and _in(m, "decobench")
            and not any(_in(m, f"decobench.{p}") for p in
                        (*FLOORS, "cli", "baselines", "reports", "netem", "suites"))}
    assert root <= FOUNDATION | FRONT_ENDS, sorted(root - FOUNDATION - FRONT_ENDS)


def test_layers_cover_the_package():
    """Sanity check of the test itself: every floor has modules, and the walk sees imports,
    function-level ones included (executors start :func:`decobench.sweeps.cell.run_cell`)."""
    layers = {_layer(m) for m in MODULES}
    assert layers == {*FLOORS, "plugins", "reports", "front end"}
    assert "decobench.runs.runner" in EDGES["decobench.cli.main"]
    assert "decobench.sweeps.cell" in EDGES["decobench.sweeps.executors"]
    assert _layer("decobench.sweeps.sweep") not in _allowed("runs")


def test_tests_use_the_decobench_namespace():
    for path in sorted((ROOT / "tests").glob("*.py")):
        tops = {n.split(".")[0] for n in _imports(path, "tests." + path.stem)}
        assert not tops & OLD_TOP_LEVEL, f"{path.name} imports {sorted(tops & OLD_TOP_LEVEL)}"


def test_the_changelog_maps_every_moved_module_to_one_that_exists():
    """CHANGELOG.md's table of 0.2.0's moves: every new module exists and no old one does
    (but a package that took an old module's name), and the checkpoint loader's map (``MOVED_MODULES``) agrees with it."""
    import re

    from decobench.runs.checkpoint import MOVED_MODULES

    table = dict(re.findall(r"^\| `(decobench\.[\w.]+)` \| `(decobench\.[\w.]+)` \|$",
                            (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE))
    assert len(table) > 30
    assert all(new in MODULES and (old not in MODULES or new.startswith(old + "."))
               for old, new in table.items())   # decobench.cli is now the CLI's package
    assert MOVED_MODULES.items() <= table.items()
