"""Workloads whose right answer is known by construction, for perflab's evidence (not its
verdict on a bottleneck: see examples/bottlenecks for those).

| module | built so that | the right answer |
| --- | --- | --- |
| ``bf16_autocast`` | a float32 model whose step runs under bf16 autocast | R01: each phase judged against the bf16 ceiling, at most 100% of it |
| ``dropout`` | a model with dropout 0.5: each step draws random masks | W01's one-step check: a tripled learning rate is MISMATCH, a no-op is ok (never MISMATCH) |
"""
