# `snakemake --config script="train.py --epochs 1"`: the user's own script, unchanged, under
# `perflab run` (perflab/attach/: a fresh observed process), its verdict, rows, evidence and
# trace in results/<tag>/run/. The same path a cluster or artifact run takes.


rule perflab_run:
    output:
        md=f"{RESULTS}/run/diagnosis.md",
        csv=f"{RESULTS}/run/results.csv",
    log:
        f"{LOGS}/perflab_run.log",
    params:
        script=RUN["script"],
    conda:
        ENV
    script:
        "../../scripts/perflab_run.py"
