"""E08's batch sweep: one fresh process per batch size, then one aggregation.

A peak-memory reading is only comparable between processes that ran the same
code up to the measured region, so every batch size is its own job (its own
Snakemake job, or its own subprocess when run by hand) writing per-batch
files through the harness::

    results/<tag>/e08_batch_sweep/b<B>.csv           rows of batch B
    results/<tag>/e08_batch_sweep/b<B>_samples.csv   its per-call samples
    results/<tag>/e08_batch_sweep/b<B>.json          its provenance

:func:`aggregate` concatenates them into the experiment's three standard
outputs and adds the sweep's three answers as rows (variant
``lowest_latency``, ``highest_throughput``, ``largest_that_fits``; metric
``batch_size``, the value is the batch size; the names are
:mod:`perflab.experiments.e08_batch_sweep`'s). An answer no batch qualifies for
is a non-ok row with the reason.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from perflab import env, io
from perflab.experiments.e08_batch_sweep import (
    BATCH,
    BATCH_SIZE,
    ENTRY,
    HIGHEST_THROUGHPUT,
    LARGEST_THAT_FITS,
    LOWEST_LATENCY,
    batch_of,
    batch_variant,
)

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


def batch_outputs(result_dir: str | Path, batch: int | str) -> dict[str, str]:
    """csv, samples and provenance of one batch size's job (``batch`` may be ``"{batch}"``)."""
    d = Path(result_dir) / SLUG
    return {
        "csv": str(d / f"b{batch}.csv"),
        "samples": str(d / f"b{batch}_samples.csv"),
        "provenance": str(d / f"b{batch}.json"),
    }


def batch_contract(contract: Mapping[str, Any], batch: int) -> dict:
    """One batch size's contract: E08's, with ``batch`` in place of the list of batches.

    Leaving the list out means adding a batch size to the sweep does not
    rerun the batch sizes already measured.
    """
    c = copy.deepcopy(dict(contract))
    params = {k: v for k, v in c.get("params", {}).items() if k != "batches"}
    params["batch"] = int(batch)
    c["params"] = params
    return c


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


# ------------------------------------------------------------------ answers


def _fits(rows: pd.DataFrame) -> dict[int, str]:
    """batch -> status of its step (the step_latency rows): ok, oom, unsupported, error."""
    out: dict[int, str] = {}
    for v, sel in rows[rows.variant.str.startswith(BATCH)].groupby("variant"):
        step = sel[sel.metric == "step_latency"]
        statuses = set(step.status) if not step.empty else set(sel.status)
        bad = sorted(statuses - {"ok"})
        out[batch_of(v)] = bad[0] if bad else "ok"
    return dict(sorted(out.items()))


def _value(rows: pd.DataFrame, batch: int, metric: str, statistic: str) -> float | None:
    sel = rows[(rows.variant == batch_variant(batch)) & (rows.metric == metric)
               & (rows.statistic == statistic) & (rows.status == "ok")]
    return None if sel.empty else float(sel.value.iloc[0])


def answer_rows(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """The three answers of the sweep, as contract rows, from the per-batch rows alone."""
    status = _fits(rows)
    ok = [b for b, s in status.items() if s == "ok"]
    medians = {b: _value(rows, b, "step_latency", "median") for b in ok}
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
        src = rows[(rows.variant == batch_variant(batch)) & (rows.metric == "step_latency")]
        base = src.iloc[0] if batch is not None and not src.empty else rows.iloc[0]
        r = {c: base[c] for c in ("workload", "model", "dtype", "device", "device_name",
                                  "mode", "execution")}
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
    """One batch size's files, checked against E08's contract (:func:`read_job`)."""
    return read_job(files, lambda prov: batch_contract(contract, _batch(prov)), _batch,
                    lambda b, v: v == batch_variant(b))


def _batch(prov: dict) -> int:
    return int(prov["contract"]["params"]["batch"])


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

    ``batch_files`` holds one mapping (csv, samples, provenance) per batch size.
    Each batch's provenance must carry the contract :func:`batch_contract`
    derives from ``contract``: results measured under another contract are
    refused, not mixed in.
    """
    log = log or (lambda msg: None)
    if not batch_files:
        raise io.ContractError(f"{EID}: no per-batch results to aggregate")
    provenances: dict[int, dict] = {}
    frames, samples = [], []
    for files in batch_files:
        batch, prov, frame, s = _read_batch(files, contract)
        provenances[batch] = prov
        frames.append(frame)
        samples.append(s)
        log(f"batch {batch}: {len(frame)} rows, {len(s)} samples from {files['csv']}")
    rows = pd.concat(frames, ignore_index=True)
    rows = rows.assign(_b=rows.variant.map(batch_of)).sort_values("_b", kind="stable")
    rows = rows.drop(columns="_b").reset_index(drop=True)
    records = rows.to_dict("records")
    answers = answer_rows(rows)
    records += answers
    for a in answers:
        log(f"{a['variant']}: " + (f"batch {int(a['value'])}" if a["status"] == "ok"
                                    else f"{a['status']} ({a['reason']})"))

    sample_frame = pd.concat(samples, ignore_index=True) if samples else pd.DataFrame()
    provenance = combined_provenance(EID, ENTRY.title, contract, provenances, "batches")
    provenance["answers"] = {a["variant"]: (int(a["value"]) if a["status"] == "ok" else
                                            {"status": a["status"], "reason": a["reason"]})
                             for a in answers}
    return write_outputs(outputs, records, sample_frame, provenance)


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


def batch_files_for(result_dir: str | Path, sizes: Iterable[int]) -> list[dict[str, str]]:
    return [batch_outputs(result_dir, b) for b in sizes]
