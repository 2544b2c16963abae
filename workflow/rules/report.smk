# Downstream of the experiments: the ledger, the claims, the diagnosis, the figures, the
# HTML report, and the comparison with another run.

# On a cluster these run on the submit host: seconds of work each, no GPU.
# (e08_batch_sweep and w01_whatif only gather their jobs' files.)


localrules:
    ledger,
    figures,
    report_html,
    e08_batch_sweep,
    w01_whatif,
    diagnosis,
    compare,
    claims,


rule ledger:
    input:
        csv=selected_csvs(),
    output:
        md=report(
            f"{RESULTS}/ledger.md",
            caption="../../report/captions/ledger.rst",
            category="00 · Ledger",
        ),
        csv=f"{RESULTS}/ledger.csv",
    log:
        f"{LOGS}/ledger.log",
    conda:
        ENV
    script:
        "../../scripts/build_ledger.py"


rule claims:
    input:
        csv=selected_csvs(),
        # a share or a ratio of medians is judged by its own interval over the raw samples
        samples=selected_samples(),
        # further processes of the experiments claim_processes names: their claims must agree
        processes=selected_process_files("csv"),
        process_samples=selected_process_files("samples"),
    output:
        report(
            f"{RESULTS}/claims.csv",
            caption="../../report/captions/claims.rst",
            category="00 · Claims",
        ),
    log:
        f"{LOGS}/claims.log",
    conda:
        ENV
    script:
        "../../scripts/build_claims.py"


# The verdict ("what is the machine waiting for"): reads every selected experiment's
# rows and writes the evidence rows it rests on and the next intervention.
rule diagnosis:
    input:
        csv=selected_csvs(),
    output:
        md=f"{RESULTS}/diagnosis.md",
        csv=f"{RESULTS}/diagnosis.csv",
    log:
        f"{LOGS}/diagnosis.log",
    conda:
        ENV
    script:
        "../../scripts/diagnose.py"


# Every figure in one job (one interpreter importing matplotlib, not one per figure),
# after the experiments: it is on no timing job's path. A figure that fails to draw
# does not stop the others: its PNG and caption say why, and the log has the traceback.
rule figures:
    input:
        csv=selected_csvs(),
        samples=selected_samples(),
    output:
        **figure_reports(),
        captions=[f["caption"] for f in figure_plan()],
    params:
        plan=figure_plan(),
    log:
        f"{LOGS}/figures.log",
    conda:
        ENV
    script:
        "../../scripts/make_figures.py"


rule report_html:
    input:
        csv=selected_csvs(),
        samples=selected_samples(),
        provenance=[exp_outputs(e)["provenance"] for e in selected()],
        ledger=f"{RESULTS}/ledger.md",
        diagnosis=f"{RESULTS}/diagnosis.md",
        claims=f"{RESULTS}/claims.csv",
        reference=reference_inputs(),
        figures=[figure_path(e) for e in selected()],
        snapshot=memory_snapshot_outputs(),
        notebook=os.path.join(workflow.basedir, "report", "perflab.py"),
        compare=compare_outputs(),
    output:
        report(
            f"{RESULTS}/report.html",
            caption="../../report/captions/report.rst",
            category="00 · Report",
        ),
    log:
        f"{LOGS}/report.log",
    conda:
        ENV
    script:
        "../../scripts/render_report.py"


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


# The escalation tool (optional: experiments.E09.snapshot): allocation history of a few
# controlled steps, rendered by PyTorch's own memory_viz; on a CPU an honest placeholder.
rule memory_snapshot:
    output:
        html=memory_snapshot_path(),
    log:
        f"{LOGS}/memory_snapshot.log",
    params:
        contract=exp_contract("E09"),
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        "../../scripts/memory_snapshot.py"


# a failed run still gets its report of what exists (partial_report in common.smk)
onerror:
    stop_fork_server()
    partial_report()
