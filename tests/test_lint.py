"""Lint and format, as CI checks them: ruff, snakefmt, snakemake --lint (and every rule logs)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/workflow_rules.py
SNAKEFILES = ["Snakefile", "workflow"]


def _run(*cmd: str, timeout: int = 300) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    return p.returncode, p.stdout + p.stderr


def _tool(name: str) -> str:
    """The tool beside this Python (pip's console scripts), else on PATH."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    assert found, f"{name} is not installed: pip install -e '.[test]'"
    return found


def test_ruff_clean():
    rc, out = _run(_tool("ruff"), "check", "--select", "F,E,W,I", "--ignore", "E501", ".")
    assert rc == 0, out


def test_snakefmt_clean():
    # settings (directive order kept as written) come from pyproject.toml [tool.snakefmt]
    rc, out = _run(_tool("snakefmt"), "--check", "--diff", *SNAKEFILES)
    assert rc == 0, out


@functools.lru_cache(maxsize=1)
def _snakemake_lint() -> tuple[int, str]:
    return _run(sys.executable, "-m", "snakemake", "--lint", "--config", "device=cpu")


def test_snakemake_lint_clean():
    rc, out = _snakemake_lint()
    assert rc == 0, out
    assert "Congratulations, your workflow is in a good condition!" in out, out


def test_every_rule_has_a_log():
    """Every rule that does work writes a log (rule all only names targets).

    Read from the workflow Snakemake parses, so the rules its loop makes are checked
    too: its linter flags each rule without a log.
    """
    from workflow_rules import rule_names

    rules = rule_names()
    assert {"all", "figures", "report_html"} <= rules and len(rules) >= 10, rules
    assert "No log directive defined" not in _snakemake_lint()[1]
