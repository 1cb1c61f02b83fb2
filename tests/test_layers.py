"""Imports go one way (DEVELOPERS.md "Architecture"; docs/architecture.md "Layers").

    foundation   decobench (the package root), decobench.errors, decobench.atomicio
    netem        decobench.netem.*              traces, links, shaping
    core         decobench.* (the rest of benchmark/)   the training core
    plugins      decobench.baselines.*          methods, registered by entry point
    reports      decobench.reports.*            tables and figures from run directories
    front ends   decobench.cli, decobench.versus, decobench.emulated.entry (+ __main__),
                 decobench.bench

Each layer imports only the layers above it in this list (plugins and reports import the
core, not each other); front ends import anything. Every import statement counts, also
those inside functions, so a lazy import cannot hide a wrong-way dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"benchmark": "decobench", "baselines": "decobench.baselines",
           "netem": "decobench.netem", "reports": "decobench.reports"}
FOUNDATION = {"decobench", "decobench.errors", "decobench.atomicio"}
FRONT_ENDS = {"decobench.cli", "decobench.emulated.entry", "decobench.emulated.__main__",
              "decobench.bench", "decobench.versus"}
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


def _layer(module: str) -> str:
    if module in FOUNDATION:
        return "foundation"
    if module in FRONT_ENDS:
        return "front end"
    for prefix, layer in (("decobench.netem", "netem"), ("decobench.baselines", "plugins"),
                          ("decobench.reports", "reports")):
        if module == prefix or module.startswith(prefix + "."):
            return layer
    return "core"


ALLOWED = {
    "foundation": {"foundation"},
    "netem": {"foundation", "netem"},
    "core": {"foundation", "netem", "core"},
    "plugins": {"foundation", "netem", "core", "plugins"},
    "reports": {"foundation", "netem", "core", "reports"},
    "front end": {"foundation", "netem", "core", "plugins", "reports", "front end"},
}
MODULES = _modules()


def _known(name: str) -> str | None:
    """The decobench module ``name`` refers to (a module, or a name inside one)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_one_way(module):
    layer = _layer(module)
    wrong = []
    for name in sorted(_imports(MODULES[module], module)):
        top = name.split(".")[0]
        assert top not in OLD_TOP_LEVEL, (
            f"{module} imports {name}: the package is decobench (decobench.{name} or, for "
            "the core, decobench.<module>)")
        target = _known(name) if top == "decobench" else None
        if target is None or target == module:
            continue
        if _layer(target) not in ALLOWED[layer]:
            wrong.append(f"{name} ({_layer(target)})")
    assert not wrong, f"{module} ({layer}) imports the wrong way: {', '.join(wrong)}"


def test_layers_cover_the_package():
    """Sanity check of the test itself: every layer exists, and the walk sees imports."""
    layers = {_layer(m) for m in MODULES}
    assert layers == set(ALLOWED)
    assert "decobench.runner" in _imports(MODULES["decobench.cli"], "decobench.cli") or any(
        n.startswith("decobench.runner") for n in _imports(MODULES["decobench.cli"],
                                                            "decobench.cli"))


def test_tests_use_the_decobench_namespace():
    for path in sorted((ROOT / "tests").glob("*.py")):
        tops = {n.split(".")[0] for n in _imports(path, "tests." + path.stem)}
        assert not tops & OLD_TOP_LEVEL, f"{path.name} imports {sorted(tops & OLD_TOP_LEVEL)}"
