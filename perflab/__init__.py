"""perflab: the chapter's measurement instruments, workloads and CSV contract.

Modules: ``timing`` (clocks and sync boundaries), ``stats`` (robust summaries),
``memory`` (allocator, NVML and RSS counters), ``env`` (environment report),
``workloads`` (the chapter's models and users' own), ``steps`` (the callables
that get timed), ``io`` (the CSV contract), ``config`` (validation),
``runner`` (the per-experiment harness), ``ledger``/``figures`` (downstream).
"""

__version__ = "0.1.0"
