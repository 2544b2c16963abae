# Calibration (runs first): the harness's own floors, the A/A floor every A/B is held
# to, the profiler's overhead and peer timers; then the cross-run comparison target.


rule c00_calibration:
    output:
        **exp_outputs("C00"),
    log:
        exp_log("C00"),
    params:
        contract=exp_contract("C00"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    priority: 100
    conda:
        ENV
    script:
        exp_script("C00")


# this run against another result directory (`--config compare_to=results/<tag>`):
# per-table and per-row ratios, verdicts and claims that changed, Mann-Whitney U on block medians.
# The same machine twice: `snakemake --cores 1 compare --config tag=<tag>-rerun compare_to=results/<tag>`
rule compare:
    input:
        csv=selected_csvs(),
        samples=selected_samples(),
        # this run's claims and diagnosis, so the comparison says which verdicts changed
        claims=f"{RESULTS}/claims.csv",
        diagnosis=f"{RESULTS}/diagnosis.csv",
    output:
        summary=f"{RESULTS}/compare/summary.md",
        rows=f"{RESULTS}/compare/rows.csv",
        tables=f"{RESULTS}/compare/tables.csv",
        verdicts=f"{RESULTS}/compare/verdicts.csv",
        samples=f"{RESULTS}/compare/samples.csv",
        figure=f"{RESULTS}/compare/compare.png",
    params:
        compare_to=RUN["compare_to"],
    log:
        f"{LOGS}/compare.log",
    conda:
        ENV
    script:
        "../../scripts/compare_runs.py"
