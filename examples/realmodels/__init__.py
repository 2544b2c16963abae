"""Real libraries' models, as a user's training code builds them: the verdict on steps of 25-150 ms.

Each module's ``make_step(device, **sizes)`` builds the model with its library, from a config
(no download), feeds it synthetic data and returns a :class:`perflab.workloads.Workload`; its
sizes default to the ones named below on a CUDA GPU and to a small model on a CPU. Nothing in
them is written for perflab: the step is the library's model, an AdamW, autocast where a user
would turn it on.

    PYTHONPATH=examples perflab diagnose realmodels.gpt2:make_step --budget 60s

| module | library | the step (CUDA) | built so that |
| --- | --- | --- | --- |
| ``gpt2`` | transformers | GPT-2 small (124 M), 8 x 512 tokens, bf16 autocast | no known bottleneck: an unseen model judged |
| ``vit`` | timm | ViT-B/16, 48 images 224 px, fp32 | no known bottleneck: an unseen model judged |
| ``resnet`` | torchvision | ResNet-50, 64 images decoded from JPEG and augmented by 2 workers, bf16 autocast | input pipeline (the decode and augmentation outrun the step) |

Each needs its library (``pip install transformers``, ``timm``, ``torchvision``); without it,
building the workload says which to install. scripts/bench_diagnose.py times the command.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from perflab.workloads import WorkloadError


def library(name: str, example: str) -> ModuleType:
    """``import name``, or a WorkloadError naming the package the example needs."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise WorkloadError(f"examples/realmodels/{example}.py builds its model with {name}, "
                            f"which is not importable here ({exc}); pip install {name}") from exc
