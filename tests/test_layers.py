"""The package's floors hold: no import runs up a floor, and no module imports itself back.

The floors are written down once, in pyproject.toml's import-linter ``layers`` contract
(core < instruments < kit < experiments < pipeline < views < cli). ``lint-imports`` checks
it; this test runs the same contract, and looks for circles of any length between modules
(the contract sees floors, not circles inside one), counting imports made inside functions
and under TYPE_CHECKING too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: import-linter brings tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _floors() -> list[str]:
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in contract["contracts"] if c["type"] == "layers"]
    return layers


def test_the_layers_contract_is_kept():
    proc = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command;"
                           "lint_imports_command()"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_every_module_sits_on_a_floor():
    """A module outside the floors would be outside the contract: only the public shims and
    the package's own entry points may stand at the top level."""
    named = {part.strip() for layer in _floors() for part in layer.split("|")}
    top = {p.stem for p in (ROOT / "perflab").glob("*.py")} - {"__init__"}
    dirs = {p.name for p in (ROOT / "perflab").iterdir() if (p / "__init__.py").is_file()}
    assert {f"perflab.{m}" for m in top | dirs} <= named


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on, stack, out = set(), [], []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.find_modules_directly_imported_by(w)))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return out


def test_no_module_imports_itself_back():
    graph = grimp.build_graph("perflab", include_external_packages=False)
    assert _cycles(graph) == []


@pytest.mark.parametrize("planted", [("perflab.a", "perflab.b", "perflab.a"),
                                     ("perflab.a", "perflab.b", "perflab.c", "perflab.a")])
def test_the_circle_finder_finds_a_planted_circle(planted):
    """It can fail: a planted circle is found, and a chain without one is not."""
    graph = grimp.ImportGraph()
    for a, b in zip(planted, planted[1:]):
        graph.add_import(importer=a, imported=b)
    graph.add_import(importer="perflab.x", imported="perflab.a")
    assert _cycles(graph) == [sorted(set(planted))]
    chain = grimp.ImportGraph()
    for a, b in zip(planted[:-1], planted[1:-1]):
        chain.add_import(importer=a, imported=b)
    assert _cycles(chain) == []
