# Downstream of the experiments: the ledger, the claims, one figure per experiment, the HTML report.

# On a cluster these run on the submit host: seconds of work each, no GPU.
# (e08_batch_sweep only gathers the per-batch jobs' files.)


localrules:
    ledger,
    figure,
    report_html,
    e08_batch_sweep,
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
            category="0 · Ledger",
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
    output:
        report(
            f"{RESULTS}/claims.csv",
            caption="../../report/captions/claims.rst",
            category="0 · Claims",
        ),
    log:
        f"{LOGS}/claims.log",
    conda:
        ENV
    script:
        "../../scripts/build_claims.py"


rule figure:
    input:
        unpack(figure_inputs),
    output:
        report(
            f"{FIGURES}/{{eid}}_{{name}}.png",
            caption="../../report/captions/figure.rst",
            category=figure_section,
            labels={"experiment": "{eid}"},
        ),
    log:
        f"{LOGS}/figure_{{eid}}_{{name}}.log",
    wildcard_constraints:
        eid="[cer][0-9]+",
    conda:
        ENV
    script:
        "../../scripts/make_figure.py"


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
            category="0 · Report",
        ),
    log:
        f"{LOGS}/report.log",
    conda:
        ENV
    script:
        "../../scripts/render_report.py"


# a failed run still gets its report of what exists (partial_report in common.smk)
onerror:
    partial_report()
