# d01_data_parallel: its rules (an experiment of several jobs keeps them here; the helpers they
# call are in common.smk, with the others)


rule d01_data_parallel:
    output:
        **exp_outputs("D01"),
    log:
        exp_log("D01"),
    params:
        contract=d01_contract(),
    threads: d01_threads()
    resources:
        **d01_resources(),
    conda:
        ENV
    script:
        exp_script("D01")
