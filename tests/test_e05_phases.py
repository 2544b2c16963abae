"""The cases of E05's claims (C10, C11, C12, C13): rows where each finding holds, fails, and sits
inside the noise, registered with claims_rows.case and run by tests/test_claim_cases.py."""

from __future__ import annotations

from claims_rows import case, sample_series, with_floor, with_samples

from perflab.experiments import e05_phases as e05

# ------------------------------------------------------------------ the claims' cases
# C10, C11, C12, C13: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def e05_rows(phases=None, nosync=None, gap_pct=4.8, floor_pct=2.0, loader=False):
    """E05's rows: {phase: (median ms, IQR ms)} synchronized and not, the sum's gap."""
    phases = phases or {"input_wait": (0.03, 0.01), "forward": (2.9, 0.1),
                        "backward": (4.7, 0.2), "optimizer": (8.4, 0.2), "logging": (0.064, 0.01)}
    nosync = nosync or {"forward": (0.7, 0.1), "backward": (1.5, 0.2), "optimizer": (0.6, 0.1),
                        "logging": (11.683, 0.5)}
    total = sum(m for m, _ in phases.values())
    specs = [("E05", e05.SUM_MINUS_TOTAL, e05.STEP_LATENCY_REL, "value", gap_pct)]
    for prefix, series in ((e05.SYNC, phases), (e05.NOSYNC, nosync)):
        for ph, (m, iqr) in series.items():
            specs += [("E05", prefix + ph, e05.PHASE_TIME, "median", m),
                      ("E05", prefix + ph, e05.PHASE_TIME, "iqr", iqr)]
    specs += [("E05", e05.SYNC + ph, e05.PHASE_SHARE, "value", 100 * m / total)
              for ph, (m, _) in phases.items()]
    frame = with_floor(floor_pct, *specs)
    source = e05.FED_BY_LOADER if loader else e05.SERVED_BATCH
    frame.loc[frame.experiment == "E05", "window"] = f"steady state; batches from {source}"
    return frame


E05_PHASES = {"input_wait": (0.03, 0.01), "forward": (2.9, 0.1), "backward": (4.7, 0.2),
              "optimizer": (8.4, 0.2), "logging": (0.064, 0.01)}
E05_NOSYNC = {"forward": (0.7, 0.1), "backward": (1.5, 0.2), "optimizer": (0.6, 0.1),
              "logging": (11.683, 0.5)}


def e05_sampled(phases=None, nosync=None, gap_pct=4.8, total_sd=0.1, n=400, loader=False):
    """E05's rows and raw samples: each phase's steps, synchronized and not (spread
    IQR / 1.349), and the uninstrumented series, whose median sets the sum's gap at
    ``gap_pct``."""
    phases, nosync = phases or E05_PHASES, nosync or E05_NOSYNC
    frame = e05_rows(phases, nosync, gap_pct=gap_pct, loader=loader)
    total = sum(m for m, _ in phases.values()) / (1 + gap_pct / 100)
    specs = [("E05", prefix + ph, e05.PHASE_TIME, sample_series(m, iqr / 1.349, n, k))
             for prefix, series in ((e05.SYNC, phases), (e05.NOSYNC, nosync))
             for k, (ph, (m, iqr)) in enumerate(series.items(), start=len(prefix))]
    return with_samples(frame, *specs, ("E05", e05.UNINSTRUMENTED_TOTAL, "step_latency",
                                        sample_series(total, total_sd, n, 99)))


def e05_sampled_with(**phases):
    return e05_sampled({**E05_PHASES, **phases})


# the lead by the interval of the difference of the two medians over the same steps
case("C10", e05_sampled, lambda: e05_sampled_with(optimizer=(2.5, 0.1)),  # backward leads
     lambda: e05_sampled_with(optimizer=(4.72, 3.0)))  # 0.02 ms ahead, the interval straddles 0
case("C11", e05_sampled, lambda: e05_sampled(gap_pct=20.0),
     lambda: e05_sampled(gap_pct=9.0, total_sd=2.0))  # 9%: the gap's interval straddles 10
case("C12", e05_sampled,
     lambda: e05_sampled(nosync={"backward": (1.518, 0.597), "logging": (0.344, 0.348)}),
     lambda: e05_sampled(nosync={"backward": (1.5, 0.6), "logging": (1.51, 0.5)}))
case("C13", e05_sampled, lambda: e05_sampled_with(input_wait=(6.0, 0.2)),  # ~30% of the step
     lambda: e05_sampled_with(input_wait=(0.75, 1.2)))  # 4.5%: the share's interval straddles 5
