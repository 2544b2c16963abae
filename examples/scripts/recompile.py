"""A compiled sequence model fed batches whose length changes every step.

Known answer: recompiling. Compiled with dynamic=False (static shapes, the fastest
kernels), each new sequence length is a new graph: Dynamo recompiles, until it hits its
recompile limit and runs the function eagerly for every length it has not compiled. Its
blocks are chains of pointwise ops that Inductor fuses and eager launches one by one, so
the eager fallback costs the step as well as the compiles did; dynamic=True compiles once.
On a GPU the batch is sized so that those kernels' memory traffic, not the host launching
them, sets the step (a 3 ms launch-bound step swung 3.0-4.7 ms from one process to the next
on a shared host, more than the change it was to show).
"""
import argparse
import random

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mix = nn.Linear(dim, dim)

    def forward(self, h):
        x = self.mix(self.norm(h))
        # tanh-GELU spelled out: eight pointwise kernels eager, one fused kernel compiled
        x = 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))
        return h + x


class Tagger(nn.Module):
    def __init__(self, vocab=1000, dim=64, depth=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.Sequential(*(Block(dim) for _ in range(depth)))
        self.out = nn.Linear(dim, vocab)

    def forward(self, tokens):
        return self.out(self.blocks(self.emb(tokens)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--backend", default="inductor")
    p.add_argument("--depth", type=int, default=4, help="blocks (the tests run 1)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", type=int, help="sequences a step (default: 256 on a GPU, 8)")
    p.add_argument("--dim", type=int, help="model width (default: 256 on a GPU, 64)")
    args = p.parse_args()
    gpu = args.device != "cpu"
    batch = args.batch or (256 if gpu else 8)

    random.seed(0)
    model = Tagger(dim=args.dim or (256 if gpu else 64), depth=args.depth).to(args.device)
    step_model = torch.compile(model, dynamic=False, backend=args.backend)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        length = random.choice(range(8, 200, 4))  # ragged batches, no padding to a bucket
        tokens = torch.randint(0, 1000, (batch, length), device=args.device)
        logits = step_model(tokens)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"step {step} length {length} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
