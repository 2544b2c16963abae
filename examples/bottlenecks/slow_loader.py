"""Input-bound by construction: every example costs a fixed amount of CPU work to decode.

The dataset "decodes" each record with ``rounds`` of SHA-256 over its bytes — a fixed
amount of work per example, the same every epoch, as an image decode or a tokenizer is —
and the DataLoader decodes in the training process (``num_workers=0``), so the step waits
for its batch. The model is a small MLP: its step is short beside the batch's decode.
The mechanism's fix is the loader's: workers, so decoding overlaps training.
"""

from __future__ import annotations

import hashlib

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, default_collate

from bottlenecks import sized
from perflab.workloads import Workload

SIZES = {"cuda": dict(features=512, width=1024, depth=4, batch=64, rounds=200, examples=1024),
         "cpu": dict(features=32, width=64, depth=2, batch=16, rounds=400, examples=256)}


class SlowDecode(Dataset):
    """``examples`` records of ``features`` floats and a class, each decoded by ``rounds``
    SHA-256 passes (deterministic work; the data is the same in every process)."""

    def __init__(self, examples: int, features: int, classes: int, rounds: int, seed: int):
        self.n, self.features, self.classes = examples, features, classes
        self.rounds, self.seed = rounds, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        digest = f"{self.seed}:{i}".encode()
        for _ in range(self.rounds):  # the decode: fixed work per example
            digest = hashlib.sha256(digest).digest()
        g = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)
        x = torch.randn(self.features, generator=g)
        return x, int(x[:4].sum() > 0) + 2 * int(x[4:8].sum() > 0)  # a learnable class


def make_step(device, *, features=None, width=None, depth=None, batch=None, rounds=None,
              examples=None, seed: int = 0) -> Workload:
    s = sized(device, SIZES, dict(features=features, width=width, depth=depth, batch=batch,
                                  rounds=rounds, examples=examples))
    device = torch.device(device)
    torch.manual_seed(seed)
    layers = [nn.Linear(s["features"], s["width"]), nn.GELU()]
    for _ in range(s["depth"] - 1):
        layers += [nn.Linear(s["width"], s["width"]), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(s["width"], 4)).to(device)
    data = SlowDecode(s["examples"], s["features"], 4, s["rounds"], seed)
    loader = DataLoader(data, batch_size=s["batch"], shuffle=False, drop_last=True,
                        num_workers=0, pin_memory=device.type == "cuda")
    return Workload(
        name="slow_loader", model=model, loader=loader, loss_fn=F.cross_entropy,
        make_batch=lambda b: tuple(default_collate([data[i] for i in range(b)])),
        batch_size=s["batch"],
        description=f"MLP {s['features']}->{s['width']}x{s['depth']} fed by a loader decoding "
                    f"{s['rounds']} SHA-256 rounds per example, no workers",
        make_optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3), optimizer_name="AdamW",
        params=s)
