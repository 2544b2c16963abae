"""The compiler by construction: torch.compile(dynamic=False) fed a new sequence length
every step.

Each batch is padded to its own longest sequence, so every step brings a new length; the
model is compiled with ``dynamic=False``, so Dynamo specializes on each length: every step
recompiles, until the recompile (cache) limit (8 by default), after which the step runs
eager, uncompiled, while the code still says torch.compile. The verdict must be the
compiler, naming the dimension whose size changed and the fix (bucketed padding to a few
fixed lengths, or ``dynamic=True`` / ``torch._dynamo.mark_dynamic``).

``backend`` ("inductor" by default; "eager" for a fast check on a CPU: Dynamo still traces,
guards and recompiles the same way) and ``recompile_limit`` (None: torch's) are the test's
knobs.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from bottlenecks import sized
from perflab.workloads import Workload

SIZES = {"cuda": dict(dim=512, vocab=8192, batch=32, base=64, lengths=12),
         "cpu": dict(dim=32, vocab=256, batch=4, base=8, lengths=12)}


class TokenModel(nn.Module):
    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mix = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, vocab)

    def forward(self, x):
        h = self.embed(x)
        return self.head(h + self.mix(h))


def make_step(device, *, dim=None, vocab=None, batch=None, base=None, lengths=None,
              backend: str = "inductor", recompile_limit: int | None = None,
              seed: int = 0) -> Workload:
    s = sized(device, SIZES, dict(dim=dim, vocab=vocab, batch=batch, base=base,
                                  lengths=lengths))
    if recompile_limit is not None:
        torch._dynamo.config.recompile_limit = recompile_limit
    torch.manual_seed(seed)
    model = TokenModel(s["vocab"], s["dim"]).to(device)
    g = torch.Generator().manual_seed(seed + 1)
    # one batch per length: each padded to its own longest sequence, as a collate_fn does
    batches = [(torch.randint(0, s["vocab"], (s["batch"], s["base"] + k), generator=g),
                torch.randint(0, s["vocab"], (s["batch"], s["base"] + k), generator=g))
               for k in range(s["lengths"])]
    compiled: dict[int, nn.Module] = {}

    def train_step(model, opt, batch):
        run = compiled.setdefault(id(model), torch.compile(model, dynamic=False,
                                                           backend=backend))
        x, y = (t.to(device, non_blocking=True) for t in batch)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(run(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        return loss

    return Workload(
        name="recompiling", model=model, loader=batches, train_step=train_step,
        batch_size=s["batch"],
        description=f"token model dim {s['dim']}, torch.compile(dynamic=False, "
                    f"backend={backend!r}), sequence lengths {s['base']}..."
                    f"{s['base'] + s['lengths'] - 1}",
        make_optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3), optimizer_name="AdamW",
        params={**s, "backend": backend})
