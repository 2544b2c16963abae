#!/bin/bash
# The GPU acceptance runs of issues 40 (a verdict in a minute) and 42 (the what-if on an
# unmodified script), on a lent GPU machine whose calls last at most 10 minutes: `diagnose`
# fits one call; `whatif`'s steps take two (STEPS="pytest input optim tiny", then
# STEPS="recompile").
#
#   bash scripts/gpu_acceptance.sh whatif   OUT   # CUDA patch tests + whatif on the known-answer scripts
#   bash scripts/gpu_acceptance.sh diagnose OUT   # perflab diagnose --no-whatif --budget ${BUDGET:-60s} (mlp: both contracts)
#   STEPS="optim recompile" ...: only those steps; PERFLAB_COMMIT=<sha>: the commit to record
#
# Run from the repository root with perflab (and, for `diagnose`, Snakemake) importable.
# Every step has its own time-out, so one that hangs costs its own slot, not the rest;
# each step's whole output is kept under OUT/<part>/, the lines that decide it are echoed.
set -u
part=${1:?whatif or diagnose}; out=${2:?output directory}
case $part in whatif|diagnose) ;; *) echo "unknown part: $part (whatif or diagnose)" >&2; exit 2 ;; esac
dir=$out/$part; mkdir -p "$dir"
export PYTHONPATH=$PWD:$PWD/examples${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# the commit the tree is, as the caller knows it: a copied tree's git metadata may be older
echo "${PERFLAB_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}" > "$dir/commit.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$dir/gpu.txt"
python -c "import torch, sys; print(torch.__version__, sys.version.split()[0])" | tee -a "$dir/gpu.txt"

step() {  # name, seconds, command...: run it, say its exit status and wall time
    local name=$1 limit=$2; shift 2
    # STEPS="optim recompile": only those (a call with less device time left)
    case " ${STEPS:-$name} " in *" $name "*) ;; *) return 1 ;; esac
    echo "=== $name"
    local start=$(date +%s)
    timeout "$limit" "$@" > "$dir/$name.log" 2>&1
    echo "rc=$? wall=$(( $(date +%s) - start ))s"
}
whatif() { local name=$1 limit=$2; shift 2
    step "$name" "$limit" python -m perflab.attach.whatif --out "$dir/$name" "$@" || return 0
    grep -E "faster|slower|undecided|FAILED|not run|does not apply" "$dir/$name.log" | tail -14; }
diagnose() { local name=$1 limit=$2; shift 2
    step "$name" "$limit" python scripts/bench_diagnose.py "$@" --device cuda --no-whatif --budget "${BUDGET:-60s}" || return 0
    grep -iE "verdict|waiting|wall|estimate|agree|total" "$dir/$name.log" | tail -12; }

case $part in
whatif)
    # the CUDA patch tests only (the rest run in CI): a fresh child each, ~10 s on an H100
    step pytest 150 python -m pytest tests/test_attach_patches.py -k "${PYTEST_K:-cuda}" -x -q -p no:cacheprovider &&
        tail -3 "$dir/pytest.log"
    whatif input 100 --budget 80s -- python examples/scripts/input_bound.py --delay-ms 4
    # a 34 s profiled first run, then ~17 s each: fused, foreach, their bracket, the floor's third
    whatif optim 130 --budget 110s -- python examples/scripts/optimizer_bound.py
    # a run compiles 8 graphs, one per length (the first 80 s on a fresh H100, 25 s once
    # Inductor's cache is warm): the change twice, its brackets and the floor's baselines
    whatif recompile 400 --budget 380s --only compile_dynamic -- python examples/scripts/recompile.py
    whatif tiny 160 --budget 145s -- python examples/scripts/tiny_kernels.py ;;
diagnose)
    diagnose mlp 220 mlp --contract both
    for ex in slow_loader tiny_kernels syncing_loss many_params; do
        diagnose "$ex" 85 "bottlenecks.$ex:make_step" --contract adaptive
    done ;;
esac
