"""The workflow's rules as Snakemake parses them (those its loop defines included)."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=1)
def rule_names() -> frozenset[str]:
    """``snakemake --list-rules``: every rule name, not a regex over the .smk files."""
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--list-rules",
         "--config", "device=cpu"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return frozenset(line.split()[0] for line in proc.stdout.splitlines() if line.strip())
