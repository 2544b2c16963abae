"""Run the configured script under `perflab run` (rule perflab_run).

``script`` is what follows ``perflab run`` on a command line: the script and its arguments
(``train.py --epochs 1``), optionally after perflab's own options (``--steps 20 -- train.py
--epochs 1``). The script's output and the verdict go to the log; the rows, evidence, trace
and diagnosis to the directory of the rule's outputs.
"""

import os
import shlex
import sys
from pathlib import Path

from perflab import cli

if __name__ == "__main__":
    sm = snakemake  # noqa: F821 (set by Snakemake's script directive)
    with open(sm.log[0], "w") as log:
        # the observed child inherits file descriptors, not sys.stdout: redirect those
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        rc = cli.main(["run", "--out", str(Path(sm.output.md).parent),
                       *shlex.split(sm.params.script)])
    if rc != 0 or not Path(sm.output.md).is_file():
        sys.exit(f"perflab run ended with status {rc}: see {sm.log[0]}")
