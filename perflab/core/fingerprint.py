"""The fingerprint of the user's code: what a measurement of their workload depends on.

A job that measures a user's workload must run again when the code it measured changes,
not only when the config does. The fingerprint is a SHA-256 over

- the target's module file and every module of the user's it imports, found by a static
  walk of their ``import`` statements (each resolved the way Python would, on this
  process's ``sys.path``; stdlib, site-packages and perflab's own package are not the
  user's code and are left out, so upgrading torch does not re-measure and a shared
  helper does);
- the workload's parameters;
- for an attached script (:func:`of_files`): the script, its own modules, and its arguments.

It enters each job's contract (``perflab.pipeline.config.contract``), which is the job's params: a
change re-runs exactly the jobs that measured that workload, under plain ``snakemake`` and
every ``perflab`` command (Snakemake's ``params`` rerun trigger), and it is recorded in each
result's provenance with the contract. Its files are named relative to their import root,
so moving the project does not re-measure.

A module imported by a computed name (``importlib.import_module(name)``) is not seen by the
static walk: import it by name, or attach the files with :func:`of_files`.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import site
import sys
import sysconfig
from pathlib import Path
from typing import Any, Iterable

_PERFLAB = Path(__file__).resolve().parents[1]
#: files larger than this are hashed but not parsed for imports (a generated table, data)
_PARSE_LIMIT = 4 << 20


def _not_users() -> list[Path]:
    """Directories whose modules are not the user's: stdlib, site-packages, perflab."""
    dirs = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        dirs.update(site.getsitepackages())
    except AttributeError:  # some virtualenvs' site module
        pass
    dirs.add(site.getusersitepackages())
    return [Path(d).resolve() for d in dirs if d] + [_PERFLAB]


def is_users(path: str | Path, excluded: list[Path] | None = None) -> bool:
    """Whether the source file ``path`` is the user's own code (see the module doc)."""
    p = Path(path).resolve()
    if not p.is_file() or {"site-packages", "dist-packages"} & set(p.parts):
        return False
    return not any(p.is_relative_to(d) for d in (_not_users() if excluded is None else excluded))


def _spec_file(name: str, excluded: list[Path]) -> Path | None | bool:
    """The source file of the user's module ``name`` on this sys.path, without importing it:
    True for a namespace package of the user's (no file of its own), None for another's.

    A dotted name's parents are imported by ``find_spec`` (Python needs their ``__path__``):
    only for parents already found to be the user's, whose code a job imports anyway."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None
    if spec is None:
        return None
    if spec.origin in (None, "namespace") and spec.submodule_search_locations:
        dirs = [Path(d).resolve() for d in spec.submodule_search_locations]
        mine = any(not any(d.is_relative_to(x) for x in excluded) for d in dirs)
        return True if mine else None
    if not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    return Path(spec.origin) if is_users(spec.origin, excluded) else None


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> list[str]:
    """Absolute names of the modules (or their attributes' modules) a module imports."""
    package = module if is_package else module.rpartition(".")[0]
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                up = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join(p for p in (*up, base) if p)
            if base:
                names.append(base)
            # `from pkg import sub` may name a submodule: tried as one
            names += [f"{base}.{a.name}" if base else a.name for a in node.names if a.name != "*"]
    return names


def user_modules(module: str) -> dict[str, Path]:
    """``module`` and every module of the user's it imports, transitively: name -> file."""
    excluded = _not_users()
    seen: dict[str, Path | None | bool] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        top = name.partition(".")[0]
        if top not in seen:  # a top-level name is found without importing anything
            seen[top] = _spec_file(top, excluded)
        if not seen[top]:
            seen[name] = None  # third-party or stdlib: its submodules are never looked up
            continue
        path = seen[name] = seen[top] if name == top else _spec_file(name, excluded)
        if not isinstance(path, Path):
            continue
        # a package's __init__ runs on import of any submodule
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        if path.suffix == ".py" and path.stat().st_size <= _PARSE_LIMIT:
            try:
                tree = ast.parse(path.read_bytes(), filename=str(path))
            except (SyntaxError, ValueError):
                continue  # hashed as it is; importing it fails with Python's own message
            todo += _imported_names(tree, name, path.name == "__init__.py")
    return {n: p for n, p in seen.items() if isinstance(p, Path)}


def _relative(name: str, path: Path) -> str:
    """A module's file named from its import root (``pkg/mod.py``): stable if the project moves."""
    stem = name.replace(".", "/")
    return f"{stem}/{path.name}" if path.name == "__init__.py" else f"{stem}{path.suffix}"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def of_files(files: dict[str, Path] | Iterable[Path], args: Any = None,
             params: Any = None) -> dict[str, Any]:
    """The fingerprint of ``files`` (name -> path, or paths named by their file name), an
    attached script's ``args`` and a workload's ``params``.

    ``sha256`` changes when any file's bytes, the arguments or the parameters do; the files
    are listed with their own hashes, the first being the one the code is named by."""
    if not isinstance(files, dict):
        files = {Path(f).name: Path(f) for f in files}
    listed = [{"path": name, "sha256": _sha(Path(p).read_bytes())} for name, p in files.items()]
    body = {"files": sorted(listed, key=lambda f: f["path"]), "args": args, "params": params}
    digest = _sha(json.dumps(body, sort_keys=True, default=str).encode())
    out = {"sha256": digest, "files": listed}
    if args is not None:
        out["args"] = args
    return out


def of_target(target: str, params: Any = None) -> dict[str, Any] | None:
    """The fingerprint of workload ``target`` (``package.module:function``) and ``params``;
    None for a builder that is not the user's code (perflab's registered ones)."""
    module, sep, _ = target.partition(":")
    if not sep or not module:
        return None
    mods = user_modules(module)
    if module not in mods:
        return None
    own = mods.pop(module)  # listed first: the code is named by it
    files = {_relative(module, own): own, **{_relative(n, p): p for n, p in sorted(mods.items())}}
    return of_files(files, params=params)


def short(fp: dict[str, Any] | None) -> str:
    """``train.py @ 3f2a1b2c`` for a fingerprint (the target's file and 8 hex digits)."""
    if not fp:
        return "perflab's built-in code"
    name = fp["files"][0]["path"] if fp.get("files") else "code"
    return f"{name} @ {fp['sha256'][:8]}"


def ago(seconds: float) -> str:
    """``2 minutes ago`` (a result's age, beside the verdict)."""
    s = max(0, int(seconds))
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if s >= size:
            n = s // size
            return f"{n} {unit}{'s' if n != 1 else ''} ago"
    return f"{s} second{'s' if s != 1 else ''} ago"


if __name__ == "__main__":  # `python -m perflab.core.fingerprint pkg.mod:fn`: what it covers
    print(json.dumps(of_target(sys.argv[1]), indent=1))
