"""Issue 38's known answers on one device, without Snakemake: the evidence under a verdict
holds on a step that leaves fp32 eager.

1. ``bf16``: examples/known/bf16_autocast (a float32 model under bf16 autocast) through E05
   and R01: each phase's FLOP/s and bytes/s as % of the ceilings of the precisions it ran
   (must be <= 100%), and the verdict.
2. ``recompiling``: examples/bottlenecks/recompiling (torch.compile(dynamic=False) fed a new
   sequence length every step) through E05: the verdict must be the compiler.
3. ``dropout``: examples/known/dropout through W01's one-step check: a no-op must be "ok" or
   "not decidable" (never MISMATCH), a tripled learning rate MISMATCH (never "ok").
4. ``convnet``: the built-in convnet through R01: a convolution ceiling of the precision its
   convolutions ran (TF32 on CUDA: cuDNN's default), its phases against it, none above 100%.
5. ``recompiling_whatif``: the recompiling step through C00 and W01's compile_dynamic (its
   own torch.compile made dynamic=True): the baseline recompiles, the fix does not, the
   one-step check passes; the change judged against C00's A/A floor.

Each part's rows, provenance and log go under OUT/<part>/; a summary (what each part
expects and got) to OUT/summary.json and stdout. Exit status 1 when an expectation fails.

    python scripts/bench_evidence.py --device cuda --out "$OUT"
    python scripts/bench_evidence.py --device cpu --out /tmp/ev --scale tiny --parts dropout
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

import torch

from perflab import cli
from perflab.core import io
from perflab.experiments import r01_roofline as r01
from perflab.experiments.w01_whatif import whatif
from perflab.pipeline import config, runner
from perflab.views import diagnose


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_bench", ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(eid: str, cfg: dict, out: Path, measure=None, contract=None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    c = contract or config.contract(cfg, eid)
    paths = {k: str(out / f"{eid.lower()}.{k}") for k in ("csv", "samples", "provenance")}
    from perflab.experiments.catalogue import EXPERIMENTS

    measure = measure or _script(EXPERIMENTS[eid].slug).measure
    runner.execute(eid, measure, c, paths, str(out / f"{eid.lower()}.log"))
    return Path(paths["csv"])


def _cfg(args, target: str, run: str, params: dict | None = None) -> dict:
    over = {"device": args.device, "workload": target, "run": run}
    if args.scale:
        over["scale"] = args.scale
    if params:
        over["workloads"] = {target: dict(params)}
    return config.load([cli.DIAGNOSE_CONFIG, *args.configfile], over)


def bf16(args, out: Path) -> dict:
    cfg = _cfg(args, "known.bf16_autocast:make_step", "E05,R01")
    rows = io.read_results([_run(e, cfg, out) for e in ("E05", "R01")])
    d = diagnose.diagnose(rows)
    fr = rows[(rows.experiment == "R01") & rows.metric.isin(
        [r01.FLOPS_FRACTION, r01.BANDWIDTH_FRACTION]) & (rows.status == "ok")
        & (rows.statistic == "median")]
    phases = {f"{v} {m}": round(float(x), 1) for v, m, x in zip(fr.variant, fr.metric, fr.value)}
    over = {k: v for k, v in phases.items() if v > r01.CEILING_MAX_PCT}
    mix = rows[(rows.variant == r01.phase_variant(r01.FORWARD_BACKWARD))
               & rows.metric.str.startswith("flops_") & (rows.metric != r01.FLOPS_FRACTION)]
    (out / "diagnosis.md").write_text(diagnose.render_markdown(d))
    return {"expect": "every phase <= 100% of its ceilings; verdict not undetermined",
            "fractions_pct": phases, "over_100": over,
            "forward_backward_flops_by_precision": dict(zip(mix.metric, mix.value)),
            "verdict": d.verdict, "because": d.because,
            "ok": not over and d.verdict != "undetermined"}


def recompiling(args, out: Path) -> dict:
    params = {"backend": "eager"} if args.device == "cpu" else {}
    cfg = _cfg(args, "bottlenecks.recompiling:make_step", "E05", params)
    torch._dynamo.reset()
    rows = io.read_results([_run("E05", cfg, out)])
    d = diagnose.diagnose(rows)
    (out / "diagnosis.md").write_text(diagnose.render_markdown(d))
    return {"expect": "verdict compiler, naming the dimension and the fix",
            "verdict": d.verdict, "because": d.because, "fix": d.intervention,
            "ok": d.verdict == "compiler"}


def _triple_lr(parts):
    for g in parts.optimizer.param_groups:
        g["lr"] *= 3
    return parts


NOOP = whatif.Intervention("noop", "no change at all", {}, "same arithmetic", ("optimizer",))
WRONG = whatif.Intervention("wrong_lr", "the learning rate tripled", {}, "same arithmetic",
                            ("optimizer",), custom=_triple_lr)


def dropout(args, out: Path) -> dict:
    from perflab.experiments import w01_whatif as w01

    cfg = _cfg(args, "known.dropout:make_step", "W01")
    w01_script = _script("w01_whatif")
    got = {}
    for iv in (NOOP, WRONG):
        c = whatif.intervention_contract(config.contract(cfg, "W01"), iv.name)
        c["params"].update(peak_calls=0)
        csv = _run("W01", cfg, out / iv.name, contract=c,
                   measure=lambda ctx, iv=iv: w01_script.measure_intervention(ctx, iv))
        o = w01.outcome(io.read_results([csv]), iv.name)
        got[iv.name] = {"check": o.check_verdict, "numbers": o.check}
    ok = (got["noop"]["check"] in (whatif.OK, whatif.NOT_DECIDABLE)
          and got["wrong_lr"]["check"] in (whatif.MISMATCH, whatif.NOT_DECIDABLE))
    return {"expect": "noop ok or not decidable; wrong_lr MISMATCH (never ok)", **got,
            "ok": ok}


def convnet(args, out: Path) -> dict:
    """R01 on the built-in convnet: a convolution ceiling of the precision its convs ran
    (TF32 on CUDA by cuDNN's default), its phases judged against it, none above 100%."""
    cfg = _cfg(args, "convnet", "R01")
    rows = io.read_results([_run("R01", cfg, out)])
    ok = rows[rows.status == "ok"]
    ceilings = {v: round(float(x) / 1e12, 4) for v, m, x in zip(ok.variant, ok.metric, ok.value)
                if m == r01.PEAK_FLOPS}
    fb = ok[ok.variant == r01.phase_variant(r01.FORWARD_BACKWARD)].set_index("metric").value
    mix = {m.removeprefix("flops_"): float(x) for m, x in fb.items()
           if m.startswith("flops_") and m != r01.FLOPS_FRACTION}
    fr = ok[ok.metric.isin([r01.FLOPS_FRACTION, r01.BANDWIDTH_FRACTION])
            & (ok.statistic == "median")]
    phases = {f"{v} {m}": round(float(x), 1) for v, m, x in zip(fr.variant, fr.metric, fr.value)}
    over = {k: v for k, v in phases.items() if v > r01.CEILING_MAX_PCT}
    conv_keys = [k for k in mix if k.startswith("conv_")]
    have = all(r01.conv_ceiling(k.removeprefix("conv_")) in {v for v in ok.variant}
               for k in conv_keys)
    tf32 = {m: float(x) for m, x in ok[ok.variant == r01.TF32_MODE].set_index("metric")
            .value.items()}
    return {"expect": "a conv ceiling for each precision the convs ran (tf32 on CUDA), "
                      "forward_backward judged against the conv+matmul blend, every phase "
                      "<= 100%",
            "ceilings_tflops": ceilings, "tf32_modes": tf32,
            "forward_backward_flops_by_key": mix,
            "forward_backward_blended_peak_tflops": round(float(fb.get(r01.BLENDED_PEAK, 0))
                                                          / 1e12, 4),
            "fractions_pct": phases, "over_100": over,
            "ok": bool(conv_keys) and have and not over}


def recompiling_whatif(args, out: Path) -> dict:
    """W01's compile_dynamic on examples/bottlenecks/recompiling, against C00's A/A floor of
    the same step: the baseline recompiles, the dynamic step does not, the check passes."""
    from perflab.experiments import w01_whatif as w01

    params = {"backend": "aot_eager"} if args.device == "cpu" else {}
    cfg = _cfg(args, "bottlenecks.recompiling:make_step", "C00,W01", params)
    torch._dynamo.reset()
    floor = io.read_results([_run("C00", cfg, out)])
    torch._dynamo.reset()
    c = whatif.intervention_contract(config.contract(cfg, "W01"), "compile_dynamic")
    c["params"].update(peak_calls=0)
    csv = _run("W01", cfg, out / "compile_dynamic", contract=c,
               measure=_script("w01_whatif").measure_one)
    rows = io.read_results([csv])
    # one value per (variant, metric): a metric may carry several statistics (the H200's
    # first_call rows did: a Series, not a number, broke this summary there)
    ok = (rows[(rows.status == "ok") & (rows.statistic == "value")]
          .drop_duplicates(["variant", "metric"]).set_index(["variant", "metric"]).value)
    o = w01.outcome(_concat(floor, rows), "compile_dynamic")
    got = {k: float(ok.get(("compile_dynamic/" + s, m), float("nan")))
           for s in ("baseline", "intervened")
           for m, k in ((w01.RECOMPILES, f"{s}_warmup_recompiles"),
                        (w01.FIRST_CALL, f"{s}_first_call_ms"))}
    return {"expect": "baseline recompiles in its warm-up, intervened 0; check ok; change "
                      "and verdict against C00's floor (faster expected, not asserted)",
            **got, "change_pct": o.change_pct, "verdict": o.verdict, "reason": o.reason,
            "check": o.check_verdict,
            "ok": (got["intervened_warmup_recompiles"] == 0
                   < got["baseline_warmup_recompiles"] and o.check_verdict == whatif.OK)}


def _concat(*frames):
    import pandas as pd

    return pd.concat([f for f in frames if not f.empty], ignore_index=True)


PARTS = {"bf16": bf16, "recompiling": recompiling, "dropout": dropout, "convnet": convnet,
         "recompiling_whatif": recompiling_whatif}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", required=True, help="directory for every part's files")
    p.add_argument("--scale", default=None, help="the contract's scale (tiny for a quick check)")
    p.add_argument("--configfile", nargs="*", default=[])
    p.add_argument("--parts", default=",".join(PARTS), help="comma-separated: "
                   + ", ".join(PARTS))
    args = p.parse_args(argv)
    out = Path(args.out)
    summary = {}
    for name in args.parts.split(","):
        print(f"[bench_evidence] {name} ...", file=sys.stderr, flush=True)
        try:
            summary[name] = PARTS[name](args, out / name)
        except Exception as exc:  # one part's failure is its result; the others still run
            summary[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
        print(json.dumps({name: summary[name]}, indent=1, default=str), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    bad = [n for n, s in summary.items() if not s.get("ok")]
    verdict = "all as expected" if not bad else "NOT as expected: " + ", ".join(bad)
    print(f"[bench_evidence] {verdict}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
