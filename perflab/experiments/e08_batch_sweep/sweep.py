"""E08's batch sweep: one fresh process per batch size, then one aggregation.

A peak-memory reading is only comparable between processes that ran the same
code up to the measured region, so every batch size is its own job (its own
Snakemake job, or its own subprocess when run by hand) writing per-batch
files through the harness::

    results/<tag>/e08_batch_sweep/b<B>.csv           rows of batch B
    results/<tag>/e08_batch_sweep/b<B>_samples.csv   its per-call samples
    results/<tag>/e08_batch_sweep/b<B>.json          its provenance
    results/<tag>/e08_batch_sweep/b<B>_r<k>.*        replicate k of batch B

The replicates are further fresh processes of one batch size's contract (the
controlled batch size when the sweep has it, else the smallest; or, with
``replicate_largest: N``, each of the N largest): with the sweep's own job they
are R processes of the same code, the between-process A/A that comparisons of
separate processes (batch sizes, E20's cold and warm jobs) are judged against,
the largest sizes' their own (a comparison between two of them, C19's top step).

:func:`aggregate` concatenates them into the experiment's three standard
outputs and adds the sweep's three answers as rows (variant
``lowest_latency``, ``highest_throughput``, ``largest_that_fits``; metric
``batch_size``, the value is the batch size; the names are
:mod:`perflab.experiments.e08_batch_sweep`'s), then the between-process floor
of the median step latency and of the throughput (:func:`floor_rows`). An
answer no batch qualifies for, or a floor that could not be measured, is a
non-ok row with the reason.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from perflab.core import env, io
from perflab.core.names import STEP_LATENCY
from perflab.experiments.e08_batch_sweep import (
    BATCH,
    BATCH_SIZE,
    ENTRY,
    FLOOR_METRICS,
    HIGHEST_THROUGHPUT,
    INTERLEAVED,
    INTERLEAVED_JOB,
    JOB_WALL,
    LARGEST_THAT_FITS,
    LOWEST_LATENCY,
    PROCESS_FLOOR,
    PROCESS_GAP_MAX,
    REPLICATES,
    batch_of,
    batch_variant,
    floor_variant,
    job_variant,
)
from perflab.instruments import stats

EID = ENTRY.eid
SLUG = ENTRY.slug
#: the answer rows, in the order they are written: variant -> what it answers
ANSWERS = {
    LOWEST_LATENCY: "batch size with the lowest median step latency",
    HIGHEST_THROUGHPUT: "batch size with the highest examples/s (its throughput row: B / "
                        "median ms per step of free-running stretches)",
    LARGEST_THAT_FITS: "largest swept batch size whose step ran (status ok); sizes above "
                       "the sweep were not tried",
}


def batches(contract: Mapping[str, Any]) -> list[int]:
    """The swept batch sizes of E08's contract, ascending, each once."""
    return sorted({int(b) for b in contract["params"]["batches"]})


def replicates(contract: Mapping[str, Any]) -> int:
    """How many further fresh processes repeat each replicated batch size (``replicates``,
    default 0)."""
    return int(contract["params"].get("replicates", 0))


def replicate_batch(contract: Mapping[str, Any]) -> int:
    """The batch size the replicates repeat: the controlled workload's when the sweep has it
    (the step C00's within-process A/A is measured on, so the two floors are of one step),
    else the smallest swept (the cheapest process)."""
    sizes = batches(contract)
    spec = contract.get("workloads", {}).get(contract.get("workload", ""), {})
    own = (spec.get("params") or {}).get("batch")
    return int(own) if own in sizes else sizes[0]


def replicated_batches(contract: Mapping[str, Any]) -> list[int]:
    """The batch sizes the replicates repeat, ascending: the ``replicate_largest`` largest
    swept sizes when it is set (each one's offset between processes is then measured where
    the sweep compares the largest batches: a device-bound step does not inherit a host-bound
    one's process-to-process spread), else :func:`replicate_batch`'s one size."""
    largest = int(contract["params"].get("replicate_largest") or 0)
    sizes = batches(contract)
    return sizes[-largest:] if largest else [replicate_batch(contract)]


def interleaved_blocks(contract: Mapping[str, Any]) -> int:
    """Round-robin blocks of the interleaved job (``interleaved_blocks``, default 0: none)."""
    return int(contract["params"].get("interleaved_blocks") or 0)


#: the params only the interleaved job reads (left out of the per-batch jobs' contracts)
INTERLEAVED_PARAMS = ("interleaved_blocks", "interleaved_inner")
#: the params only the per-batch jobs and their replicates read (left out of the
#: interleaved job's contract, so adding a replicate does not rerun it)
PROCESS_PARAMS = ("replicates", "replicate_largest", "repeats")


def jobs(contract: Mapping[str, Any]) -> list[tuple[int, int]]:
    """(batch, replicate) of every job: each batch size (replicate 0), then the replicates,
    then the interleaved job (INTERLEAVED_JOB) when it has blocks and two sizes to compare."""
    extra = [(b, k) for k in range(1, replicates(contract) + 1)
             for b in replicated_batches(contract)]
    if interleaved_blocks(contract) and len(batches(contract)) > 1:
        extra.append(INTERLEAVED_JOB)
    return [(b, 0) for b in batches(contract)] + extra


def job_name(batch: int | str, replicate: int = 0) -> str:
    """A job's name in its file names and Snakemake's ``{batch}`` wildcard: ``64``, ``64_r1``,
    ``interleaved``."""
    if (batch, replicate) == INTERLEAVED_JOB:
        return INTERLEAVED
    return f"{batch}_r{replicate}" if replicate else f"{batch}"


def parse_job(name: str) -> tuple[int, int]:
    """(batch, replicate) of a job name (``64`` -> (64, 0), ``64_r2`` -> (64, 2),
    ``interleaved`` -> INTERLEAVED_JOB)."""
    if str(name) == INTERLEAVED:
        return INTERLEAVED_JOB
    batch, _, rep = str(name).partition("_r")
    return int(batch), int(rep or 0)


def batch_outputs(result_dir: str | Path, batch: int | str, replicate: int = 0) -> dict[str, str]:
    """csv, samples and provenance of one job (``batch`` may be ``"{batch}"``)."""
    d = Path(result_dir) / SLUG
    name = job_name(batch, replicate)
    return {
        "csv": str(d / f"b{name}.csv"),
        "samples": str(d / f"b{name}_samples.csv"),
        "provenance": str(d / f"b{name}.json"),
    }


def batch_contract(contract: Mapping[str, Any], batch: int, replicate: int = 0) -> dict:
    """One job's contract: E08's, with ``batch`` in place of the list of batches.

    Leaving the list (and the replicates' number and sizes) out means adding a batch size
    or a replicate does not rerun the jobs already measured. A replicate's contract
    is its batch size's plus ``replicate: k``, the one key that tells its files apart.
    """
    c = copy.deepcopy(dict(contract))
    if (batch, replicate) == INTERLEAVED_JOB:  # every batch size, none of the processes' keys
        params = {k: v for k, v in c.get("params", {}).items() if k not in PROCESS_PARAMS}
        params["batches"] = batches(c)
        c["params"] = {**params, INTERLEAVED: True}
        return c
    params = {k: v for k, v in c.get("params", {}).items()
              if k not in ("batches", "replicates", "replicate_largest", *INTERLEAVED_PARAMS)}
    params["batch"] = int(batch)
    if replicate:
        params["replicate"] = int(replicate)
    c["params"] = params
    return c


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


# ------------------------------------------------------------------ answers


def _fits(rows: pd.DataFrame) -> dict[int, str]:
    """batch -> status of its step (the step_latency rows): ok, oom, unsupported, error."""
    out: dict[int, str] = {}
    for v, sel in rows[rows.variant.str.startswith(BATCH)].groupby("variant"):
        step = sel[sel.metric == STEP_LATENCY]
        statuses = set(step.status) if not step.empty else set(sel.status)
        bad = sorted(statuses - {"ok"})
        out[batch_of(v)] = bad[0] if bad else "ok"
    return dict(sorted(out.items()))


def _value(rows: pd.DataFrame, batch: int, metric: str, statistic: str,
           replicate: int = 0) -> float | None:
    sel = rows[(rows.variant == job_variant(batch, replicate)) & (rows.metric == metric)
               & (rows.statistic == statistic) & (rows.status == "ok")]
    return None if sel.empty else float(sel.value.iloc[0])


#: the contract columns a derived row copies from the row it is derived from
CONTRACT_OF_SOURCE = ("workload", "model", "dtype", "device", "device_name", "mode", "execution")


def answer_rows(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """The three answers of the sweep, as contract rows, from the per-batch rows alone."""
    status = _fits(rows)
    ok = [b for b, s in status.items() if s == "ok"]
    medians = {b: _value(rows, b, STEP_LATENCY, "median") for b in ok}
    medians = {b: m for b, m in medians.items() if m is not None}
    throughput = {b: _value(rows, b, "throughput", "median") for b in ok}
    throughput = {b: t for b, t in throughput.items() if t is not None}
    chosen = {
        # ties go to the smaller batch size (dicts iterate in ascending batch order)
        LOWEST_LATENCY: (min(medians, key=medians.get) if medians else None,
                         "argmin of the median step latency"),
        HIGHEST_THROUGHPUT: (max(throughput, key=throughput.get) if throughput else None,
                             "argmax of examples/s"),
        LARGEST_THAT_FITS: (max(ok) if ok else None, "largest batch size with status ok"),
    }
    bad = {s for s in status.values() if s != "ok"}
    out = []
    for name, (batch, how) in chosen.items():
        src = rows[(rows.variant == batch_variant(batch)) & (rows.metric == STEP_LATENCY)]
        base = src.iloc[0] if batch is not None and not src.empty else rows.iloc[0]
        r = {c: base[c] for c in CONTRACT_OF_SOURCE}
        r.update(
            experiment=EID,
            variant=name,
            input_shape=base["input_shape"] if batch is not None else "",
            metric=BATCH_SIZE,
            window=f"{ANSWERS[name]}; among batch sizes {', '.join(map(str, status))}",
            sync_boundary=f"derived from the per-batch rows ({how})",
            statistic="value",
            unit="examples",
            n=len(status),
        )
        if batch is not None:
            r.update(value=float(batch), status="ok", reason="")
        else:
            word = "oom" if bad == {"oom"} else (sorted(bad - {"oom"}) or ["error"])[0]
            detail = ", ".join(f"batch {b}: {s}" for b, s in status.items()) or "no batch rows"
            r.update(value=None, status=word, reason=f"no batch size qualifies ({detail})")
        out.append(r)
    return out


# ------------------------------------------------------------------ the between-process floor


def _floor_row(rows: pd.DataFrame, sizes: Sequence[int], n_reps: int,
               metric: str) -> list[dict]:
    """The floor of ``metric``'s median over the 1 + n_reps processes of each batch size in
    ``sizes`` (their spreads pooled), and the largest gap among one size's processes; one
    non-ok row with the reason when it cannot be measured."""
    groups = {b: [job_variant(b, k) for k in range(n_reps + 1)] for b in sizes}
    firsts = [vs[0] for vs in groups.values()]
    src = rows[rows.variant.isin(firsts) & (rows.metric == metric)]
    base = src.iloc[0] if not src.empty else rows.iloc[0]
    unit = "%"
    common = {c: base[c] for c in CONTRACT_OF_SOURCE}
    which = "; ".join(f"batch {b}: {vs[0]}" + (f" and {', '.join(vs[1:])}" if vs[1:] else "")
                      for b, vs in groups.items())
    common.update(
        experiment=EID, variant=floor_variant(metric), input_shape=base["input_shape"],
        statistic="value", unit=unit, n=len(sizes) * (n_reps + 1),
        window=f"the median {metric} of {n_reps + 1} fresh processes of one contract per "
               f"batch size, the sweep's own job and {n_reps} replicate(s) ({which})",
        sync_boundary=f"each median as its own row ({base['sync_boundary']}); the bound is "
                      "t(0.975, df) x sqrt(2) x s, s = standard deviation of ln(median) over "
                      "one batch size's processes, pooled over the batch sizes (df = their "
                      "processes less one each): 95% of gaps between two separate processes "
                      "of the same code lie inside it (perflab.instruments.stats.process_floor_pct)")
    values = {b: [_value(rows, b, metric, "median", k) for k in range(n_reps + 1)]
              for b in sizes}
    missing = [v for b, vs in groups.items() for v, x in zip(vs, values[b]) if x is None]
    if n_reps == 0 or missing:
        status = sorted({str(s) for s in src.status} - {"ok"}) or ["error"]
        why = ("no replicate processes configured (replicates: 0): claims use the run's jobs "
               "of the controlled step (e08_batch_sweep.run_process_floor)" if n_reps == 0
               else "a process has no ok median: " + ", ".join(missing))
        word = "unsupported" if n_reps == 0 else status[0]
        return [{**common, "metric": PROCESS_FLOOR, "value": None, "status": word,
                 "reason": why}]
    gap = max(100 * (max(vs) / min(vs) - 1) for vs in values.values())
    return [
        {**common, "metric": PROCESS_FLOOR,
         "value": stats.process_floor_pct(*values.values()), "status": "ok", "reason": ""},
        {**common, "metric": PROCESS_GAP_MAX, "value": gap, "status": "ok", "reason": "",
         "sync_boundary": "100 x (largest / smallest median - 1) over one batch size's "
                          "processes, the largest over the batch sizes"},
    ]


def floor_rows(rows: pd.DataFrame, contract: Mapping[str, Any],
               replicate_provenances: Mapping[int, dict]) -> list[dict[str, Any]]:
    """The between-process A/A of the sweep: for the median step latency and the throughput,
    the floor (95% prediction bound of the relative gap between two fresh processes of one
    contract) and the largest gap seen; then what the replicate jobs cost (their wall_s)."""
    sizes, n_reps = replicated_batches(contract), replicates(contract)
    out = [r for m in FLOOR_METRICS for r in _floor_row(rows, sizes, n_reps, m)]
    if replicate_provenances:
        walls = [_job_s(p) for p in replicate_provenances.values()]
        out.append({**{k: out[0][k] for k in (*CONTRACT_OF_SOURCE, "experiment",
                                               "input_shape")},
                    "variant": REPLICATES, "metric": JOB_WALL, "value": sum(walls),
                    "unit": "s", "statistic": "value", "n": len(walls), "status": "ok",
                    "reason": "", "window": f"the {len(walls)} replicate job(s) of batch "
                    f"{', '.join(map(str, sizes))}: {', '.join(f'{w:.2f}' for w in walls)} s",
                    "sync_boundary": "each job's provenance wall_s less the time it waited "
                    "for the device lock (from the harness's start to its files written; "
                    "interpreter start and imports not included)"})
    return out


def _job_s(provenance: Mapping[str, Any]) -> float:
    """Seconds a job ran: its wall_s less the time it waited for another job's device lock."""
    waited = (provenance.get("device_lock") or {}).get("waited_s") or 0.0
    return max(0.0, float(provenance.get("wall_s", 0.0)) - float(waited))


# ------------------------------------------------------------------ aggregation


def read_job(files: Mapping[str, str], expected: Callable[[dict], Mapping[str, Any]],
             key: Callable[[dict], Any], own: Callable[[Any, str], bool]):
    """(key, provenance, rows, samples) of one job's files (csv, samples, provenance).

    ``expected(prov)`` is the contract the job must have run under, ``key(prov)`` names it
    (a batch size, an intervention) and ``own(key, variant)`` says which rows it may hold:
    results measured under another contract, or holding another job's rows, are refused.
    """
    prov = io.read_json(files["provenance"])
    k = key(prov)
    want = _jsonable(expected(prov))
    if _jsonable(prov["contract"]) != want:
        diff = sorted(c for c in set(want) | set(prov["contract"])
                      if want.get(c) != prov["contract"].get(c))
        raise io.ContractError(
            f"{files['provenance']}: {k} was measured under another contract "
            f"(differs in {', '.join(diff)}); rerun it")
    frame = io.read_results([files["csv"]])
    others = sorted({v for v in frame.variant if not own(k, v)})
    if others:
        raise io.ContractError(f"{files['csv']}: rows of other jobs than {k}: {others}")
    return k, prov, frame, io.read_samples(files["samples"])


def _read_batch(files: Mapping[str, str], contract: Mapping[str, Any]):
    """One job's files (a batch size, or its replicate), checked against E08's contract
    (:func:`read_job`); its key is (batch, replicate)."""
    return read_job(files, lambda prov: batch_contract(contract, *_job(prov)), _job, _owns)


def _owns(job: tuple[int, int], variant: str) -> bool:
    """May ``job``'s files hold rows of ``variant``? The interleaved job's are its own
    ``interleaved/...`` variants, any other job's the one of its batch size (or replicate)."""
    if job == INTERLEAVED_JOB:
        return variant.startswith(f"{INTERLEAVED}/")
    return variant == job_variant(*job)


def _job(prov: dict) -> tuple[int, int]:
    params = prov["contract"]["params"]
    if params.get(INTERLEAVED):
        return INTERLEAVED_JOB
    return int(params["batch"]), int(params.get("replicate", 0))


#: the key (with the jobs' name after it) that marks the provenance of an aggregation
DIFFERS_ACROSS = "environment_differs_across_"


def combines_jobs(provenance: Mapping[str, Any]) -> bool:
    """Whether ``provenance`` is an aggregation's (:func:`combined_provenance`): its
    ``wall_s`` sums its jobs' own, each counted already where that job ran."""
    return any(k.startswith(DIFFERS_ACROSS) for k in provenance)


def combined_provenance(eid: str, title: str, contract: Mapping[str, Any],
                        provenances: Mapping[Any, dict], jobs: str) -> dict[str, Any]:
    """The provenance of an experiment of many jobs: the first job's environment (and which
    keys differ across jobs), the span of their times, their summed wall time, their code
    (one record when they agree), and each job's own provenance under ``jobs``."""
    first = provenances[min(provenances)]
    environment = dict(first["environment"])
    environment["config_hash"] = env.config_hash(contract)
    differ = sorted(
        k for k in environment
        if k != "config_hash"
        and any(p["environment"].get(k) != first["environment"].get(k)
                for p in provenances.values())
    )
    return {
        "experiment": eid,
        "title": title,
        "contract": dict(contract),
        "environment": environment,
        f"{DIFFERS_ACROSS}{jobs}": differ,
        "started": min(p["started"] for p in provenances.values()),
        "finished": max(p["finished"] for p in provenances.values()),
        "wall_s": round(sum(float(p.get("wall_s", 0.0)) for p in provenances.values()), 3),
        "workloads": first.get("workloads", {}),
        # the jobs' code: one record when they agree, else none (the report then flags it)
        "instrument_code": (first.get("instrument_code") if len(
            {json.dumps(p.get("instrument_code"), sort_keys=True)
             for p in provenances.values()}) == 1 else {"files": {f"({jobs} differ)": ""}}),
        jobs: {str(k): p for k, p in sorted(provenances.items())},
    }


def write_outputs(outputs: Mapping[str, str], records: list[dict], samples: pd.DataFrame,
                  provenance: dict) -> pd.DataFrame:
    """Validate ``records``, then write samples, provenance and rows (nothing if a row is bad)."""
    provenance = {**provenance, "rows": len(records), "samples": len(samples)}
    frame = io.rows_to_frame(records)
    io.validate_rows(frame)  # nothing is written if any row breaks the contract
    io.write_samples(outputs["samples"], samples.to_dict("records"))
    io.atomic_write_json(outputs["provenance"], provenance)
    return io.write_results(outputs["csv"], records)


def aggregate(
    batch_files: Sequence[Mapping[str, str]],
    contract: Mapping[str, Any],
    outputs: Mapping[str, str],
    log=None,
) -> pd.DataFrame:
    """Write E08's csv, samples and provenance from per-batch files; return the rows.

    ``batch_files`` holds one mapping (csv, samples, provenance) per job: each
    batch size, and each replicate (:func:`jobs`). Each job's provenance must
    carry the contract :func:`batch_contract` derives from ``contract``: results
    measured under another contract are refused, not mixed in.
    """
    log = log or (lambda msg: None)
    if not batch_files:
        raise io.ContractError(f"{EID}: no per-batch results to aggregate")
    provenances: dict[tuple[int, int], dict] = {}
    frames, samples = {}, []
    for files in batch_files:
        job, prov, frame, s = _read_batch(files, contract)
        provenances[job] = prov
        frames[job] = frame
        samples.append(s)
        log(f"{job_variant(*job)}: {len(frame)} rows, {len(s)} samples from {files['csv']}")
    if not any(job[1] == 0 and job != INTERLEAVED_JOB for job in provenances):
        raise io.ContractError(f"{EID}: replicates or the interleaved job but no batch "
                               "size's own job to aggregate")
    # the batch sizes in ascending order, then the replicates, then the interleaved job
    order = sorted(frames, key=lambda job: (job == INTERLEAVED_JOB, job[1], job[0]))
    rows = pd.concat([frames[j] for j in order], ignore_index=True)
    records = rows.to_dict("records")
    answers = answer_rows(rows)
    floor = floor_rows(rows, contract, {j: p for j, p in provenances.items() if j[1]})
    records += answers + floor
    for a in answers + floor:
        log(f"{a['variant']} {a['metric']}: " + (f"{a['value']:.4g}" if a["status"] == "ok"
                                                 else f"{a['status']} ({a['reason']})"))

    sample_frame = pd.concat(samples, ignore_index=True) if samples else pd.DataFrame()
    provenance = _provenance(contract, provenances)
    provenance["answers"] = {a["variant"]: (int(a["value"]) if a["status"] == "ok" else
                                            {"status": a["status"], "reason": a["reason"]})
                             for a in answers}
    return write_outputs(outputs, records, sample_frame, provenance)


def _provenance(contract: Mapping[str, Any], jobs_: Mapping[tuple[int, int], dict]) -> dict:
    """E08's provenance (:func:`combined_provenance` of its batch sizes' jobs), with the
    replicates and the interleaved job apart: their own provenances, their span and wall
    time counted in, and what the replicates cost (``replicates_s``, lock waits left out)."""
    reps = {job_name(b, k): p for (b, k), p in sorted(jobs_.items()) if k}
    interleaved = jobs_.get(INTERLEAVED_JOB)
    out = combined_provenance(EID, ENTRY.title, contract,
                              {b: p for (b, k), p in jobs_.items()
                               if not k and (b, k) != INTERLEAVED_JOB}, "batches")
    if interleaved is not None:  # its own provenance, its time counted in
        out[INTERLEAVED] = interleaved
        out["started"] = min(out["started"], interleaved["started"])
        out["finished"] = max(out["finished"], interleaved["finished"])
        out["wall_s"] = round(out["wall_s"] + float(interleaved.get("wall_s", 0.0)), 3)
    if reps:
        out["started"] = min(out["started"], *(p["started"] for p in reps.values()))
        out["finished"] = max(out["finished"], *(p["finished"] for p in reps.values()))
        out["wall_s"] = round(out["wall_s"] + sum(float(p.get("wall_s", 0.0))
                                                  for p in reps.values()), 3)
    out["replicates"] = reps
    out["replicates_s"] = round(sum(_job_s(p) for p in reps.values()), 3)
    return out


def summary_line(rows: pd.DataFrame) -> str:
    """One line per answer, for logs."""
    out = []
    for name in ANSWERS:
        sel = rows[rows.variant == name]
        if sel.empty:
            continue
        r = sel.iloc[0]
        out.append(f"{name}={int(r['value'])}" if r["status"] == "ok" else f"{name}={r['status']}")
    return ", ".join(out)


def batch_files_for(result_dir: str | Path,
                    jobs_: Iterable[tuple[int, int] | int]) -> list[dict[str, str]]:
    """The files of each job: (batch, replicate) pairs, or batch sizes alone."""
    return [batch_outputs(result_dir, *(j if isinstance(j, tuple) else (j,))) for j in jobs_]
