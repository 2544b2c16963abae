"""The experiments this pipeline runs, with the IDs of shared/catalogue.md.

``EXPERIMENTS`` maps each id to its :class:`~perflab.experiments.Experiment`, in the
chapter's order. Nothing is registered here: every module of :mod:`perflab.experiments`
contributes its ``ENTRY``, so an experiment is added by its read-side module, its script
(``scripts/<slug>.py``) and its test (README, "Adding an experiment").
"""

from __future__ import annotations

from perflab.experiments import modules
from perflab.kit.experiment import Experiment

__all__ = ["EXPERIMENTS", "Experiment"]

EXPERIMENTS: dict[str, Experiment] = {eid: m.ENTRY for eid, m in modules().items()}
