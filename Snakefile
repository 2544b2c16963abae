# perflab: every measurement of "Performance: What Is the Machine Waiting For?"
# `snakemake --cores 1` runs each experiment as its own job (a fresh process),
# then builds the ledger, the figures and the HTML report for this machine.
import glob
import os

from snakemake.utils import min_version

min_version("8.20")


# found from any working directory (`--directory`), so outputs can live elsewhere
configfile: os.path.join(workflow.basedir, "config", "config.yaml")


# schema validation (defaults filled) + the checks a schema cannot make; one
# error naming the key stops the run before any job starts
include: "workflow/rules/common.smk"
include: "workflow/rules/experiments.smk"


# experiments of more than one job: each its own rules, workflow/rules/<slug>.smk
for smk in sorted(
    glob.glob(
        os.path.join(workflow.basedir, "workflow", "rules", "[a-z][0-9][0-9]_*.smk")
    )
):

    include: smk


include: "workflow/rules/report.smk"
include: "workflow/rules/run.smk"


rule all:
    input:
        final_outputs(),
    default_target: True
