"""Workload targets checked without torch: the error they raise, and the registered builders'
parameters read from :mod:`perflab.instruments.workloads`' source.

The workflow validates its configuration each time Snakemake loads it (every invocation, a
dry run included); importing torch for that cost about 1.5 s a load on a 2-core CPU. A
registered builder (``mlp``, ...) is checked here from its signature in the source; a user's
``package.module:function`` is still imported (:func:`perflab.instruments.workloads.resolve_target`), and
every job, and the run's pre-flight, builds the workload itself.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import Any

WORKLOADS_SOURCE = Path(__file__).resolve().parents[1] / "instruments" / "workloads.py"


class WorkloadError(ValueError):
    """A workload target that cannot be resolved or breaks the contract.

    ``param`` names the offending parameter when one is to blame.
    """

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def check_accepted(target: str, accepted: set[str] | None, params: dict[str, Any]) -> None:
    """Raise if ``params`` names an argument outside ``accepted`` (None: the builder takes
    any). ``seed`` is exempt: the pipeline passes it only to builders that take it."""
    if accepted is None:
        return
    unknown = sorted(set(params) - accepted - {"seed"})
    if unknown:
        raise WorkloadError(
            f"workload {target!r} takes no parameter {unknown[0]!r} "
            f"(it takes: {', '.join(sorted(accepted))})",
            param=unknown[0],
        )


@cache
def registered() -> dict[str, set[str] | None]:
    """{registered name: the keyword parameters its builder takes besides ``device``
    (None: any, a ``**kwargs``)}, from ``REGISTRY`` and the builders' ``def`` lines in
    perflab/instruments/workloads.py (what :func:`perflab.instruments.workloads._accepted` reads by inspection)."""
    tree = ast.parse(WORKLOADS_SOURCE.read_text(encoding="utf-8"))
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    table = next(n.value for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                 and _assigns(n, "REGISTRY"))
    out: dict[str, set[str] | None] = {}
    for key, value in zip(table.keys, table.values):
        args = defs[value.id].args
        out[key.value] = (None if args.kwarg else
                          {a.arg for a in args.args + args.kwonlyargs} - {"device"})
    return out


def _assigns(node: ast.Assign | ast.AnnAssign, name: str) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)
