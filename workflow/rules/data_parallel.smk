# Data parallel (D01): one job whose script starts N ranks through torch.distributed's
# standard launcher (torchrun; gloo on a CPU, NCCL on GPUs) and merges their per-step
# records. Selected by `run: all` only on a machine with two or more CUDA devices; named
# (`run: all,D01`), it runs anywhere. On SLURM it is one job of N tasks on one node,
# a GPU per rank on CUDA (perflab.experiments.d01_data_parallel.distributed.job_resources).


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
