"""Attach to an unmodified training script: ``perflab run -- python train.py``.

- :mod:`perflab.attach.observers` — the global hooks installed in the script's process
  (steps from the optimizer's step hook, phases, memory, compiler, syncs, a profiled
  window), writing evidence to a JSON file named by an environment variable;
- :mod:`perflab.attach.bootstrap` — the child's entry: installs the observers, then runs
  the script as ``__main__`` with its own ``sys.argv``;
- :mod:`perflab.attach.evidence` — the evidence file as CSV-contract rows;
- :mod:`perflab.attach.verdict` — the verdict (perflab.views.diagnose's engine, plus the findings
  only a real loop shows: recompiling, memory that grows every step);
- :mod:`perflab.attach.run` — the parent: starts the child, passes its output through,
  prints the verdict.
"""

#: the environment variable naming the child's evidence file (the script's stdout is never
#: parsed: it is the user's)
EVIDENCE_ENV = "PERFLAB_ATTACH_EVIDENCE"
#: the environment variable holding the observers' settings (JSON)
SETTINGS_ENV = "PERFLAB_ATTACH_SETTINGS"
