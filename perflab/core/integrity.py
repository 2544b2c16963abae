"""Whether a job's result files are still the bytes it wrote.

A job records the SHA-256 of its rows and samples in its provenance JSON (``files_sha256``).
A file changed or corrupted since (an edit, a disk fault, a half copy) no longer matches: the
workflow moves it aside (:func:`set_aside`: renamed, not deleted) so Snakemake measures that
experiment again instead of reading it, and the report built on it is retired as stale
(perflab/views/partial.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

#: the files of a result whose bytes the provenance records
KINDS = ("csv", "samples")


def sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def record(outputs: Mapping[str, str]) -> dict[str, str]:
    """{kind: sha256} of a job's written files, for its provenance."""
    return {k: sha256(outputs[k]) for k in KINDS if k in outputs and Path(outputs[k]).is_file()}


def changed(outputs: Mapping[str, str]) -> list[str]:
    """The files of one result (``csv``, ``samples``, ``provenance`` paths) whose bytes differ
    from what its provenance recorded; empty where it recorded nothing (an older run) or the
    result is not there (Snakemake measures a missing one)."""
    prov = Path(outputs.get("provenance", ""))
    try:
        recorded = json.loads(prov.read_text()).get("files_sha256") or {}
    except (OSError, ValueError, AttributeError):
        return []
    out = []
    for kind, digest in recorded.items():
        path = Path(outputs.get(kind, ""))
        if kind in KINDS and path.is_file() and sha256(path) != digest:
            out.append(str(path))
    return out


def set_aside(path: str | Path) -> Path:
    """Rename a changed result file out of the way (``x.csv`` -> ``x.csv.changed-<time>``):
    its job runs again, and nothing is lost."""
    import time

    path = Path(path)
    kept = path.with_name(f"{path.name}.changed-{time.strftime('%Y%m%dT%H%M%S')}")
    path.rename(kept)
    return kept
