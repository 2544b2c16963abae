# D01 (data parallel): its own rules, and the helpers only they use (experiments of more
# than one job keep their rules here, workflow/rules/<slug>.smk, included by the Snakefile).

# D01 data parallel: one job launching its ranks (perflab.experiments.d01_data_parallel.distributed). Its launch (ranks,
# backend, threads per rank) is part of its contract. A launch this machine cannot make
# stops the run only when D01 is selected: elsewhere the workflow parses all the same, and
# the job, if asked for by name, says why it cannot run.
from perflab.experiments.d01_data_parallel import (
    distributed as perflab_distributed,
)  # noqa: E402


def d01_on_cluster():
    return workflow.non_local_exec or workflow.remote_exec


def d01_plan():
    cluster = d01_on_cluster()
    try:
        return perflab_distributed.plan(
            exp_contract("D01"),
            visible_cuda=None if cluster else visible_cuda(),
            cores=timing_threads(),
            cores_per_rank=cluster,
        )
    except perflab_distributed.PlanError as exc:
        if "D01" not in selected():
            return None
        raise WorkflowError(f"config error at '{exc.key}': {exc.message}") from None


def visible_cuda():
    """CUDA devices this host sees (torch asked only where the run is on CUDA)."""
    if not RUN["resolved_device"].startswith("cuda"):
        return 0
    import torch

    return torch.cuda.device_count()


def d01_contract():
    """D01's contract with its launch, when selected (by hand the script plans its own)."""
    p = d01_plan()
    c = exp_contract("D01")
    return perflab_distributed.with_plan(c, p) if p else c


def d01_threads():
    """Locally every core of --cores (the ranks share them); on a cluster, per rank (task)."""
    return timing_threads()


def d01_resources():
    return perflab_distributed.job_resources(d01_plan(), gpus=bool(gpu_request()))


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
