"""The stopping rule as W01 and the adaptive interleaved A/B apply it, in seeded simulations.

perflab.instruments.timing.rounds_until_decided (what sequential_ab runs) is fed simulated
block medians instead of timed ones: each block pair shares a drift (a shared machine), each
side's median carries lognormal noise, and now and then one side's block is hit by an outlier
(a stall 10-50 % long). For W01's sizes (rounds of timing.ROUND_BLOCKS pairs, at most
MAX_BLOCKS_FACTOR x its configured blocks) it prints the false-positive rate under A/A, the
power at twice the floor and the stretches timed against the fixed count. tests/test_sequential_ab.py
asserts the same properties.

    python scripts/bench_sequential.py [--runs 2000] [--seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np

from perflab.instruments import sequential as seq
from perflab.instruments import timing

#: W01's configured blocks and stretches per block (its schema defaults: 12 blocks, inner 30
#: steps = 3 stretches of 10); the adaptive A/B times one stretch per block, at most
#: MAX_BLOCKS_FACTOR x the fixed count of stretches
FIXED_BLOCKS, STRETCHES = 12, 3
MAX_BLOCKS_FACTOR = 2
FIXED_STRETCHES = FIXED_BLOCKS * STRETCHES
#: block-median noise (lognormal sigma), shared drift per pair, outlier chance and size
NOISE, DRIFT, OUTLIER_P, OUTLIER = 0.01, 0.03, 0.05, (0.10, 0.50)
#: the A/A floor (%) the simulated A/B is judged against: about the spread of an A/A's
#: per-block differences (sqrt 2 x NOISE), as C00 measures it
FLOOR_PCT = 1.5


def simulate(rng: np.random.Generator, effect_pct: float, *, floor_pct: float = FLOOR_PCT,
             max_blocks: int = MAX_BLOCKS_FACTOR * FIXED_STRETCHES,
             round_blocks: int = timing.ROUND_BLOCKS) -> tuple[str, int]:
    """One adaptive A/B on simulated block medians, B ``effect_pct`` % slower than A:
    (the decision's state, the block pairs it ran)."""
    a_blocks: list[float] = []
    b_blocks: list[float] = []

    def side(drift: float) -> float:
        hit = 1 + rng.uniform(*OUTLIER) if rng.random() < OUTLIER_P else 1.0
        return drift * rng.lognormal(0.0, NOISE) * hit

    def run_round(k: int) -> tuple[list[float], list[float]]:
        for _ in range(k):
            drift = 25.0 * rng.lognormal(0.0, DRIFT)
            a_blocks.append(side(drift))
            b_blocks.append(side(drift) * (1 + effect_pct / 100))
        return a_blocks, b_blocks

    d = timing.rounds_until_decided(run_round, floor_pct=floor_pct, max_blocks=max_blocks,
                                    round_blocks=round_blocks)
    return d.state, d.n


def rates(effect_pct: float, runs: int, seed: int, **kw) -> dict[str, float]:
    """Over ``runs`` seeded A/Bs: the share called faster or slower, within the floor or
    undecided, and the mean blocks run."""
    rng = np.random.default_rng(seed)
    got = [simulate(rng, effect_pct, **kw) for _ in range(runs)]
    states = [state for state, _ in got]
    return {"changed": float(np.mean([s in (seq.FASTER, seq.SLOWER) for s in states])),
            "slower": float(np.mean([s == seq.SLOWER for s in states])),
            "within": float(np.mean([s == seq.WITHIN_FLOOR for s in states])),
            "undecided": float(np.mean([s == seq.UNDECIDED for s in states])),
            "mean_blocks": float(np.mean([n for _, n in got]))}


# ------------------------------------------------------------------ a claim's own threshold
#: C40's shape (E19's pair: 24 fixed block pairs of 30 calls, judged against a threshold of
#: its own): the spread (%) of one fixed block pair's relative difference, and C00's floor
#: for m pairs, the 95 % bound of a median of m such differences (docs/sampling.md), looked
#: up as perflab.experiments.floors.noise_floor_pct looks it up (the largest count written
#: not above the pairs, else the fewest's)
CLAIM_BLOCKS, CLAIM_INNER, CLAIM_SPREAD = 24, 30, 10.0


def claim_floor(pairs: float) -> float:
    from perflab.experiments.c00_calibration import FLOOR_PAIRS

    fitting = [m for m in FLOOR_PAIRS if m <= pairs]
    m = max(fitting) if fitting else min(FLOOR_PAIRS)
    return 1.96 * 1.25 * CLAIM_SPREAD / m ** 0.5


def claim_decided(a: list[float], b: list[float], threshold_pct: float, pairs: float) -> bool:
    """The claim's judgement of the blocks run (perflab.kit.claims.ab_against): the A/B's
    bootstrap interval (perflab.instruments.stats.judge) excludes the threshold, and its
    effect lies farther from it than C00's floor for the fixed pairs the blocks fill."""
    from perflab.instruments import stats

    j = stats.judge(a, b, n_resamples=400)
    lo, hi = sorted((100 * j.ci_low / np.median(a), 100 * j.ci_high / np.median(a)))
    return not lo <= threshold_pct <= hi and \
        abs(j.relative_pct - threshold_pct) > claim_floor(pairs)


def _claim_blocks(rng: np.random.Generator, effect_pct: float, k: int, calls: int,
                  a: list[float], b: list[float]) -> None:
    """``k`` more simulated block pairs of ``calls`` calls: a shorter block's difference
    spreads by sqrt(fixed calls / calls) more."""
    spread = CLAIM_SPREAD * (CLAIM_INNER / calls) ** 0.5
    for _ in range(k):
        drift = 10.0 * rng.lognormal(0.0, DRIFT)
        a.append(drift)
        b.append(drift * (1 + (effect_pct + rng.normal(0.0, spread)) / 100))


def claim_rates(effect_pct: float, threshold_pct: float, runs: int, seed: int,
                thresholds: tuple[float, ...] | None = None) -> dict[str, float]:
    """Over ``runs`` seeded A/Bs B ``effect_pct`` % slower than A: the share whose claim
    (against ``threshold_pct``) is decided under the fixed contract and under the adaptive
    rule stopping on ``thresholds`` (default: the claim's own; seq.NO_CHANGE: the A/B's
    own question), and the adaptive's mean block pairs (of CLAIM_INNER / 3 calls)."""
    most, small = timing.adaptive_sizes(CLAIM_BLOCKS, CLAIM_INNER)
    rng = np.random.default_rng(seed)
    fixed, adaptive, blocks = [], [], []
    for _ in range(runs):
        a: list[float] = []
        b: list[float] = []
        _claim_blocks(rng, effect_pct, CLAIM_BLOCKS, CLAIM_INNER, a, b)
        fixed.append(claim_decided(a, b, threshold_pct, CLAIM_BLOCKS))
        a, b = [], []

        def run_round(k: int) -> tuple[list[float], list[float]]:
            _claim_blocks(rng, effect_pct, k, small, a, b)
            return a, b

        d = timing.rounds_until_decided(
            run_round, floor_pct=lambda n: claim_floor(n * small / CLAIM_INNER),
            max_blocks=most, thresholds=thresholds or (threshold_pct,))
        adaptive.append(claim_decided(a, b, threshold_pct, d.n * small / CLAIM_INNER))
        blocks.append(d.n)
    return {"fixed": float(np.mean(fixed)), "adaptive": float(np.mean(adaptive)),
            "mean_blocks": float(np.mean(blocks)), "max_blocks": float(most)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    mx = MAX_BLOCKS_FACTOR * FIXED_STRETCHES
    print(f"rounds of {timing.ROUND_BLOCKS} one-stretch block pairs, at most {mx}; the fixed "
          f"contract times {FIXED_STRETCHES} stretches a side ({FIXED_BLOCKS} blocks of "
          f"{STRETCHES}); floor {FLOOR_PCT}%; {args.runs} seeded runs each")
    for label, eff in (("A/A", 0.0), ("at the floor", FLOOR_PCT),
                       ("2x floor", 2 * FLOOR_PCT), ("clear (20%)", 20.0)):
        r = rates(eff, args.runs, args.seed)
        print(f"{label:>13}: called changed {r['changed']:.3f}, within floor "
              f"{r['within']:.3f}, undecided {r['undecided']:.3f}; mean blocks "
              f"{r['mean_blocks']:.1f} (fixed {FIXED_STRETCHES} stretches, max {mx}); saved "
              f"{1 - r['mean_blocks'] / FIXED_STRETCHES:+.0%}")
    print(f"a claim's own threshold (-20 %), {CLAIM_BLOCKS} fixed pairs of {CLAIM_INNER} "
          f"calls, block spread {CLAIM_SPREAD} %; claims decided, {args.runs // 5} runs each:")
    for label, eff, on in (("clear of it", -13.0, None), ("on it", -20.0, None),
                           ("clear, stopping on 0", -13.0, seq.NO_CHANGE)):
        r = claim_rates(eff, -20.0, args.runs // 5, args.seed, on)
        print(f"{label:>20}: fixed {r['fixed']:.3f}, adaptive {r['adaptive']:.3f} in "
              f"{r['mean_blocks']:.1f} pairs of {CLAIM_INNER // 3} calls (at most "
              f"{r['max_blocks']:.0f}; the fixed contract's calls fill "
              f"{3 * CLAIM_BLOCKS})")


if __name__ == "__main__":
    main()
