"""Rank records of D01 from a simulated data-parallel timeline, with known answers.

:func:`records` lays out each step of every configuration on every rank the way DDP runs it
— forward, a backward whose buckets become ready one after another, an all-reduce per
bucket that completes ``transfer / buckets`` ms after the last rank handed it over (and
after the one before it), the optimizer — and writes the records :mod:`perflab.experiments.d01_data_parallel.ranks`
writes. So a test knows what the rows must say (a planted sleep of S ms in rank 1's forward
makes rank 0 wait S ms at the first all-reduce) and can make a claim hold, fail, or drown
in jitter.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from perflab.experiments.d01_data_parallel.distributed import Config, configurations


@dataclass(frozen=True)
class Shape:
    """One configuration's step, in ms (per rank unless said)."""

    fwd: float = 2.0
    bwd: float = 4.0  # backward compute of the whole model
    opt: float = 0.5
    buckets: int = 4
    transfer: float = 2.0  # all buckets' all-reduce, the transfer alone
    blocking: bool = False
    k: int = 1
    plant: tuple[int, str, float] | None = None
    jitter: float = 0.05  # sd (ms) added to every duration
    timed: bool = True


def default_shapes(cfgs: list[Config]) -> dict[str, Shape]:
    """A shape per configuration that behaves as DDP's does (overlap hides some comm)."""
    out = {}
    for c in cfgs:
        s = Shape(blocking=c.blocking, k=c.accumulate, plant=c.plant, timed=c.timed)
        if c.bucket_cap_mb is not None:
            s = replace(s, buckets=1 if c.bucket_cap_mb >= 1 else 8)
        if c.hook == "fp16":
            s = replace(s, transfer=s.transfer / 2)
        out[c.name] = s
    return out


def _planted(s: Shape, rank: int, phase: str) -> float:
    return s.plant[2] if s.plant and s.plant[0] == rank and s.plant[1] == phase else 0.0


def one_step(s: Shape, ranks: int, rng, starts: list[float]) -> tuple[list[dict], list[float]]:
    """Every rank's record of one step, rank r starting at ``starts[r]`` on a common clock
    (its previous step's end); and when each rank's step ends on that clock."""
    def d(x):
        return max(1e-3, x + s.jitter * rng.standard_normal())

    per = []
    for r in range(ranks):
        inp = d(0.01) + _planted(s, r, "input")
        fwd = sum(d(s.fwd) for _ in range(s.k)) + _planted(s, r, "forward")
        early_bwd = sum(d(s.bwd) for _ in range(s.k - 1))
        b0 = inp + fwd + early_bwd  # the synchronizing backward starts (after its forward)
        per.append({"inp": inp, "fwd": fwd, "early": early_bwd, "b0": b0,
                    "start_bwd": b0 + _planted(s, r, "backward"),
                    "piece": [d(s.bwd / max(s.buckets, 1)) for _ in range(max(s.buckets, 1))]})
    ready = [starts[r] + p["start_bwd"] for r, p in enumerate(per)]  # on the common clock
    done_prev, marks = 0.0, [[] for _ in range(ranks)]
    for i in range(s.buckets if s.timed else 0):
        ready = [ready[r] + per[r]["piece"][i] for r in range(ranks)]
        done = max(max(ready), done_prev) + d(s.transfer / s.buckets)
        for r in range(ranks):
            at = [ready[r], done if s.blocking else ready[r] + 0.01, done]
            marks[r].append([t - starts[r] for t in at] + [1024])  # on the rank's own clock
            if s.blocking:
                ready[r] = done  # the backward resumes only when this all-reduce is done
        done_prev = done
    out, ends = [], []
    for r, p in enumerate(per):
        if s.timed:
            b1 = max(ready[r], done_prev) + 0.02 - starts[r]
        else:
            b1 = p["start_bwd"] + sum(p["piece"]) + d(s.transfer)
        opt = d(s.opt) + _planted(s, r, "optimizer")
        phases = {"input": p["inp"], "forward": p["fwd"],
                  "backward": p["early"] + (b1 - p["b0"]), "optimizer": opt}
        out.append({"phases": phases, "step_ms": b1 + opt, "backward": [p["b0"], b1],
                    "buckets": marks[r], "ahead": True, "submit_ms": b1 + opt})
        ends.append(starts[r] + b1 + opt)
    return out, ends


def records(params: dict, *, ranks: int = 2, shapes: dict[str, Shape] | None = None,
            seed: int = 0) -> list[dict]:
    """The rank records of D01's configurations under ``params`` (its contract's)."""
    cfgs = configurations(params)
    shapes = {**default_shapes(cfgs), **(shapes or {})}
    rng = np.random.default_rng(seed)
    recs = [{"rank": r, "world": ranks, "backend": "gloo", "device": "cpu",
             "device_name": "simulated", "boundary": "a simulated timeline (tests)",
             "unsupported": "", "steps": [],
             "row_defaults": {"workload": "mlp", "model": "simulated", "input_shape": "[16, 64]",
                              "dtype": "float32"}} for r in range(ranks)]
    count = {c.name: 0 for c in cfgs}
    for b in range(params["blocks"]):
        for c in cfgs:
            starts = [0.0] * ranks  # a barrier before each configuration's run
            for _ in range(params["inner"]):
                steps, starts = one_step(shapes[c.name], ranks, rng, starts)
                for r, step in enumerate(steps):
                    recs[r]["steps"].append({"config": c.name, "block": b,
                                             "step": count[c.name], **step})
                count[c.name] += 1
    return recs
