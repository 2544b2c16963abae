"""Workloads whose right answer is known by construction, for perflab's evidence (not its
verdict on a bottleneck: see examples/bottlenecks for those).

| module | built so that | the right answer |
| --- | --- | --- |
| ``dropout`` | a model with dropout 0.5: each step draws random masks | W01's one-step check: a tripled learning rate is MISMATCH, a no-op is ok (never MISMATCH) |
"""
