# Diagnose: R01 measures this device's ceilings and the controlled step's achieved
# fractions; `diagnosis` reads every selected experiment's rows and writes the verdict
# ("what is the machine waiting for"), the evidence rows it rests on and the next intervention.


rule r01_roofline:
    output:
        **exp_outputs("R01"),
    log:
        exp_log("R01"),
    params:
        contract=exp_contract("R01"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("R01")


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
