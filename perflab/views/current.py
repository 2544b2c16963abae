"""Whether a run's results were measured with the code and parameters of this workload now.

Each experiment's provenance records its contract, whose ``workloads`` entry carries the
parameters and the fingerprint of the user's code (perflab/core/fingerprint.py). A verdict is
printed only from results whose entry equals the one the current config and code resolve
to; beside it, what it was measured with and when ("measured: train.py @ 3f2a1b2c,
2 minutes ago"). Results of other code are refused, never shown as current.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from perflab.core import fingerprint
from perflab.pipeline import config as cfgmod


def _same(a: Any, b: Any) -> bool:
    return json.dumps(cfgmod.canonical(a), sort_keys=True, default=str) == \
        json.dumps(cfgmod.canonical(b), sort_keys=True, default=str)


def _provenance(cfg: Mapping[str, Any], eid: str, root: Path) -> dict | None:
    path = root / cfgmod.experiment_outputs(cfg, eid)["provenance"]
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def other_code(cfg: Mapping[str, Any], eids: Iterable[str], root: str | Path = ".") -> dict:
    """{eid: why} for each result measured with another workload code or parameters than
    ``cfg`` resolves to now (or whose provenance is missing or unreadable)."""
    root = Path(root)
    out = {}
    for eid in eids:
        if not (root / cfgmod.experiment_outputs(cfg, eid)["csv"]).is_file():
            continue  # no result: said elsewhere (not measured)
        prov = _provenance(cfg, eid, root)
        if prov is None or "contract" not in prov:
            out[eid] = "its provenance JSON is missing or unreadable"
            continue
        now = cfgmod.contract(cfg, eid)["workloads"]
        was = prov["contract"].get("workloads", {})
        for name, entry in now.items():
            if not _same(was.get(name), entry):
                then = (was.get(name) or {})
                files = [(c or {}).get("files") for c in (then.get("code"), entry.get("code"))]
                what = "code" if not _same(*files) else "parameters"
                out[eid] = (f"measured with other {what} of {name} "
                            f"({fingerprint.short(then.get('code'))}, now "
                            f"{fingerprint.short(entry.get('code'))})")
                break
    return out


def measured_line(cfg: Mapping[str, Any], eids: Iterable[str], root: str | Path = ".",
                  now: dt.datetime | None = None) -> str:
    """``measured: train.py @ 3f2a1b2c, 2 minutes ago``: the controlled workload's code and
    the age of the oldest result the verdict reads."""
    root = Path(root)
    now = now or dt.datetime.now(dt.timezone.utc)
    finished = []
    for eid in eids:
        prov = _provenance(cfg, eid, root)
        if prov and prov.get("finished"):
            finished.append(dt.datetime.fromisoformat(prov["finished"]))
    name = cfg["workload"]
    code = (cfg.get("resolved_code") or {}).get(name)
    what = fingerprint.short(code) if code else f"{name} (perflab's built-in code)"
    age = f", {fingerprint.ago((now - min(finished)).total_seconds())}" if finished else ""
    return f"measured: {what}{age}"
