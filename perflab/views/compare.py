"""Set two runs' result directories side by side: this run against another.

``compare(this_dir, ref_dir, out_dir)`` reads each directory's result CSVs
(any ``*.csv`` with the contract's columns; ``*_samples.csv`` as raw samples;
``claims.csv`` when present) and writes, under ``out_dir``:

* ``rows.csv`` — every measured row present in both, matched on its contract
  keys, with ``ratio = this / ref``;
* ``tables.csv`` — each experiment's regenerated table (perflab.kit.tables), cell
  by cell, with the ratio of every numeric cell;
* ``verdicts.csv`` — every A/B's 0/1 verdict rows (``difference_resolved``,
  ``ab_resolved``) and, when both directories hold a ``claims.csv`` (a
  ``diagnosis.csv``), every claim (the diagnosis's verdict and each
  candidate's outcome), with whether it changed
  and whether it was decided in both runs (a change then is a flip);
* ``samples.csv`` — per series with raw samples in both: the medians, their
  ratio and a Mann-Whitney U test (scipy.stats) of the two runs' block medians
  (not the autocorrelated samples), Benjamini-Hochberg-corrected across series;
* ``summary.md`` and ``compare.png`` (the ratios of time medians by experiment).

Two runs on the same machine should agree on every verdict whose effect is
above the noise floor; on different machines the ratios say by how much.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perflab import experiments
from perflab.core import io

# a run's result files: read here, found by perflab.core.io (the config checks them too)
from perflab.core.io import load_rows, load_samples, result_csvs, result_dir  # noqa: F401
from perflab.experiments.catalogue import EXPERIMENTS
from perflab.instruments import ab
from perflab.kit.claims import DECIDED

#: the contract columns two rows must share to be the same measurement (not the device)
KEY = ["experiment", "variant", "workload", "dtype", "mode", "execution", "metric",
       "statistic", "unit"]
SAMPLE_KEY = ["experiment", "variant", "execution", "metric", "unit"]
#: column names a claims.csv may use for the claim's name and for its verdict
CLAIM_ID_COLUMNS = ("claim_id", "claim", "id", "name")
CLAIM_VERDICT_COLUMNS = ("verdict", "status", "result")
#: claim verdicts that decide are perflab.kit.claims.DECIDED (REPRODUCED, DIFFERS); the others
#: (INCONCLUSIVE, ERROR, NOT RUN, UNSUPPORTED) decide nothing, so a change to or from one is
#: never a flip


def _ratio(a: float, b: float) -> float:
    return a / b if b not in (0, 0.0) and math.isfinite(a) and math.isfinite(b) else math.nan


def row_ratios(this: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    """Measured rows present in both runs, matched on :data:`KEY`, with this / ref."""
    cols = [*KEY, "value"]
    a = this[this.status == "ok"][cols].drop_duplicates(KEY)
    b = ref[ref.status == "ok"][cols].drop_duplicates(KEY)
    m = a.merge(b, on=KEY, suffixes=("_this", "_ref"))
    m["ratio"] = [_ratio(x, y) for x, y in zip(m.value_this, m.value_ref)]
    return m


def table_ratios(this: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    """Each experiment's table in both runs, numeric cell by numeric cell, with this / ref.

    Table rows are matched by their first column (the row's label) and, for
    repeated labels, by order; a row or column present in one run only is left out.
    """
    out = []
    for eid in sorted(set(this.experiment) & set(ref.experiment)):
        if eid not in EXPERIMENTS:
            continue
        ta = experiments.table(eid, this[this.experiment == eid])
        tb = experiments.table(eid, ref[ref.experiment == eid])
        if ta.empty or tb.empty:
            continue
        label = ta.columns[0]
        if label not in tb.columns:
            continue
        ta = ta.assign(_k=ta.groupby(label).cumcount())
        tb = tb.assign(_k=tb.groupby(label).cumcount())
        rows_b = {(r[label], r["_k"]): r for r in tb.to_dict("records")}
        for r in ta.to_dict("records"):
            rb = rows_b.get((r[label], r["_k"]))
            if rb is None:
                continue
            for col in ta.columns:
                if col in (label, "_k", "note") or col not in tb.columns:
                    continue
                va, vb = r[col], rb[col]
                if isinstance(va, (int, float, np.number)) and isinstance(
                        vb, (int, float, np.number)) and not isinstance(va, bool):
                    out.append({"experiment": eid, "row": str(r[label]), "column": col,
                                "this": float(va), "ref": float(vb),
                                "ratio": _ratio(float(va), float(vb))})
    return pd.DataFrame(out, columns=["experiment", "row", "column", "this", "ref", "ratio"])


def _claims_column(frame: pd.DataFrame, names: tuple[str, ...]) -> str | None:
    low = {c.lower(): c for c in frame.columns}
    return next((low[n] for n in names if n in low), None)


def _diagnosis_outcomes(diag: pd.DataFrame) -> dict[str, str]:
    """{"verdict": the verdict's label, candidate label: fits / ruled out / not measured}."""
    out: dict[str, str] = {}
    if not {"candidate", "label", "outcome", "verdict"} <= set(diag.columns):
        return out  # not a diagnosis table
    for rec in diag.drop_duplicates("candidate").to_dict("records"):
        if str(rec["verdict"]).lower() == "true":
            out["verdict"] = str(rec["label"])
        if rec["candidate"] != "undetermined":
            out[str(rec["label"])] = str(rec["outcome"])
    return out


def verdict_changes(this: pd.DataFrame, ref: pd.DataFrame,
                    this_claims: pd.DataFrame | None = None,
                    ref_claims: pd.DataFrame | None = None,
                    this_diagnosis: pd.DataFrame | None = None,
                    ref_diagnosis: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every verdict of both runs, and whether it changed.

    Verdicts are each A/B's 0/1 rows (:data:`perflab.instruments.ab.VERDICT_METRICS`) and, when
    both runs have a claims table, each claim's verdict (its name and verdict columns
    found by name: :data:`CLAIM_ID_COLUMNS`, :data:`CLAIM_VERDICT_COLUMNS`).

    ``decided``: the claim was decided in both runs (REPRODUCED or DIFFERS in
    each: its effect was outside each run's noise); ``flipped``: decided in both
    and different — the disagreements that reproducibility forbids. A change to
    or from INCONCLUSIVE is a run whose noise hid the effect, and one to or from
    ERROR an instrument that failed in one run: neither is a flip.

    With both runs' ``diagnosis.csv``: the diagnosis's verdict ("what is the
    machine waiting for") and each candidate's outcome (fits / ruled out),
    decided when measured in both.
    """
    cols = ["source", "experiment", "item", "this", "ref", "changed", "decided", "flipped"]
    out = []
    r = row_ratios(this[this.metric.isin(ab.VERDICT_METRICS)],
                   ref[ref.metric.isin(ab.VERDICT_METRICS)])
    for rec in r.to_dict("records"):
        a = "resolved" if rec["value_this"] else "inconclusive"
        b = "resolved" if rec["value_ref"] else "inconclusive"
        out.append({"source": "ab", "experiment": rec["experiment"],
                    "item": f"{rec['variant']} {rec['metric']}", "this": a, "ref": b,
                    "changed": a != b, "decided": False, "flipped": False})
    if this_claims is not None and ref_claims is not None:
        ida, va = (_claims_column(this_claims, CLAIM_ID_COLUMNS),
                   _claims_column(this_claims, CLAIM_VERDICT_COLUMNS))
        idb, vb = (_claims_column(ref_claims, CLAIM_ID_COLUMNS),
                   _claims_column(ref_claims, CLAIM_VERDICT_COLUMNS))
        if all((ida, va, idb, vb)):
            exp_col = _claims_column(this_claims, ("experiment", "eid"))
            ref_map = dict(zip(ref_claims[idb].astype(str), ref_claims[vb].astype(str)))
            for rec in this_claims.to_dict("records"):
                cid = str(rec[ida])
                if cid in ref_map:
                    a, b = str(rec[va]), ref_map[cid]
                    decided = a in DECIDED and b in DECIDED
                    out.append({"source": "claim",
                                "experiment": str(rec[exp_col]) if exp_col else "",
                                "item": cid, "this": a, "ref": b, "changed": a != b,
                                "decided": decided, "flipped": decided and a != b})
    if this_diagnosis is not None and ref_diagnosis is not None:
        a_map, b_map = _diagnosis_outcomes(this_diagnosis), _diagnosis_outcomes(ref_diagnosis)
        for item in [k for k in a_map if k in b_map]:
            a, b = a_map[item], b_map[item]
            decided = "not measured" not in (a, b) and "undetermined" not in (a, b)
            out.append({"source": "diagnosis", "experiment": "", "item": item, "this": a,
                        "ref": b, "changed": a != b, "decided": decided,
                        "flipped": decided and a != b})
    return pd.DataFrame(out, columns=cols)


#: a series recorded as fewer blocks than this is cut into this many runs of consecutive samples
SAMPLE_CHUNKS = 8
#: the fewest block values a side needs to be tested
MIN_BLOCKS = 3


def block_values(series: pd.DataFrame, chunks: int = SAMPLE_CHUNKS) -> tuple[np.ndarray, str]:
    """One value per block of a sample series, and what a block is.

    Consecutive calls of one series are autocorrelated (the machine's state
    drifts slowly), so testing ~400 samples as independent overstates the
    evidence. The unit of a test is the block the series was measured in (its
    median): the interleaved blocks when the series has them, else ``chunks``
    runs of consecutive samples in call order.
    """
    if series.block.nunique() >= MIN_BLOCKS:
        return series.groupby("block").value.median().to_numpy(float), "blocks"
    ordered = series.sort_values(["block", "index"]).value.to_numpy(float)
    parts = np.array_split(ordered, min(chunks, len(ordered)))
    return np.array([np.median(p) for p in parts]), "runs of consecutive samples"


def sample_tests(this: pd.DataFrame, ref: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """Series with raw samples in both runs: medians, ratio, and a test of their block values.

    Mann-Whitney U on the two runs' block values (:func:`block_values`), then
    the Benjamini-Hochberg correction across every series tested
    (``scipy.stats.false_discovery_control``): ``significant`` is an adjusted
    p below ``alpha``, so among the series called different at most ``alpha``
    are expected not to be.
    """
    from scipy.stats import false_discovery_control, mannwhitneyu

    cols = [*SAMPLE_KEY, "n_this", "n_ref", "blocks_this", "blocks_ref", "block", "median_this",
            "median_ref", "ratio", "p", "p_adjusted", "significant"]
    out = []
    gb = dict(list(ref.groupby(SAMPLE_KEY)))
    for key, g in this.groupby(SAMPLE_KEY):
        h = gb.get(key)
        if h is None:
            continue
        (a, how), (b, _) = block_values(g), block_values(h)
        if min(len(a), len(b)) < MIN_BLOCKS:
            continue
        ma, mb = float(g.value.median()), float(h.value.median())
        out.append({**dict(zip(SAMPLE_KEY, key)), "n_this": len(g), "n_ref": len(h),
                    "blocks_this": len(a), "blocks_ref": len(b), "block": how,
                    "median_this": ma, "median_ref": mb, "ratio": _ratio(ma, mb),
                    "p": float(mannwhitneyu(a, b, alternative="two-sided").pvalue)})
    frame = pd.DataFrame(out, columns=cols)
    if len(frame):
        frame["p_adjusted"] = false_discovery_control(frame.p.to_numpy(), method="bh")
        frame["significant"] = frame.p_adjusted < alpha
    return frame


def _read_table(d: Path, name: str) -> pd.DataFrame | None:
    p = d / name
    return io.read_table(p) if p.is_file() else None


def figure(rows: pd.DataFrame, out_png: str | Path, title: str) -> Path:
    """Ratios of the time medians (ms rows, statistic median), one strip per experiment."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    from perflab.kit.figures import apply_style

    apply_style()
    d = rows[(rows.unit == "ms") & (rows.statistic == "median") & np.isfinite(rows.ratio)
             & (rows.ratio > 0)]
    fig, ax = plt.subplots(figsize=(8, 4.6), layout="constrained")
    if d.empty:
        ax.text(0.5, 0.5, "no time medians in both runs", ha="center", transform=ax.transAxes)
    else:
        sns.stripplot(data=d, x="experiment", y="ratio", ax=ax, hue="experiment", legend=False,
                      size=5, jitter=0.2, order=sorted(d.experiment.unique()))
        ax.set_yscale("log")
        ax.axhline(1.0, color="#444444", lw=1, ls="--")
    ax.set_ylabel("this run / reference (time medians, log)")
    ax.set_xlabel("")
    fig.suptitle(title, fontsize=11)
    out = Path(out_png)
    try:
        io.atomic_write(out, lambda fh: fig.savefig(fh, format="png", dpi=120), binary=True)
    finally:
        plt.close(fig)
    return out


def compare(this_dir: str | Path, ref_dir: str | Path, out_dir: str | Path) -> dict[str, Any]:
    """Write the comparison of ``this_dir`` against ``ref_dir`` into ``out_dir``.

    Either may be a result directory or a shipped reference run (see ``result_dir``).
    """
    this_dir, ref_dir, out_dir = Path(this_dir), Path(ref_dir), Path(out_dir)
    for d in (this_dir, ref_dir):
        if not d.is_dir():
            raise FileNotFoundError(f"result directory {str(d)!r} does not exist")
    (this_csvs, this_claims), (ref_csvs, ref_claims) = result_dir(this_dir), result_dir(ref_dir)
    this, ref = load_rows(this_csvs), load_rows(ref_csvs)
    if ref.empty:
        raise ValueError(f"{str(ref_dir)!r} holds no result CSV")
    rows = row_ratios(this, ref)
    tabs = table_ratios(this, ref)
    verdicts = verdict_changes(this, ref, _read_table(this_claims, "claims.csv"),
                               _read_table(ref_claims, "claims.csv"),
                               _read_table(this_claims, "diagnosis.csv"),
                               _read_table(ref_claims, "diagnosis.csv"))
    samp = sample_tests(load_samples(this_csvs), load_samples(ref_csvs))
    for name, frame in (("rows", rows), ("tables", tabs), ("verdicts", verdicts),
                        ("samples", samp)):
        io.atomic_write_csv(out_dir / f"{name}.csv", frame)
    figure(rows, out_dir / "compare.png", f"{this_dir.name} vs {ref_dir.name}")
    times = rows[(rows.unit == "ms") & (rows.statistic == "median")].ratio.dropna()
    changed = verdicts[verdicts.changed]
    decided = verdicts[verdicts.decided.astype(bool) & (verdicts.source == "claim")]
    diag = verdicts[(verdicts.source == "diagnosis") & (verdicts.item == "verdict")]
    lines = [
        f"# {this_dir.name} compared with {ref_dir.name}", "",
        f"- rows matched: {len(rows)}; time medians: {len(times)}, geometric mean ratio "
        + (f"{float(np.exp(np.log(times[times > 0]).mean())):.3f}" if (times > 0).any()
           else "n/a"),
        f"- table cells compared: {len(tabs)}",
        f"- verdicts compared: {len(verdicts)}, changed: {len(changed)}",
        f"- claims decided in both runs (REPRODUCED or DIFFERS in each): {len(decided)}, "
        f"the same in both: {int((~decided.flipped.astype(bool)).sum())}, flipped: "
        f"{int(decided.flipped.astype(bool).sum())}",
        *([f"- diagnosis (what the machine waits for): {diag.this.iloc[0]} here, "
           f"{diag.ref.iloc[0]} in the reference"] if len(diag) else []),
        f"- sampled series tested (Mann-Whitney U on block medians, Benjamini-Hochberg across "
        f"series): {len(samp)}, differing at adjusted p < 0.05: "
        f"{int(samp.significant.sum()) if len(samp) else 0}",
    ]
    if len(changed):
        lines += ["", "## Verdicts that changed", "",
                  "| source | experiment | item | this | ref | decided in both (a flip) |",
                  "| --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {r.source} | {r.experiment} | {r.item} | {r.this} | {r.ref} | "
                  f"{'yes' if r.flipped else 'no'} |" for r in changed.itertuples()]
    io.atomic_write_text(out_dir / "summary.md", "\n".join(lines) + "\n")
    return {"rows": rows, "tables": tabs, "verdicts": verdicts, "samples": samp}
