"""A compiled sequence model fed batches whose length changes every step.

Known answer: recompiling. Compiled with dynamic=False (static shapes, the fastest
kernels), each new sequence length is a new graph: Dynamo recompiles, until it hits its
recompile limit and runs the function eagerly.
"""
import argparse
import random

import torch
from torch import nn


class Tagger(nn.Module):
    def __init__(self, vocab=1000, dim=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, tokens):
        h = self.emb(tokens)
        # each position sees the whole sequence: a mean over it (a cumsum here hit an
        # Inductor codegen error on CUDA with torch 2.11, a scan kernel at some lengths)
        h = h + torch.relu(self.mix(h)).mean(1, keepdim=True)
        return self.out(h)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--backend", default="inductor")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()

    random.seed(0)
    model = Tagger().to(args.device)
    step_model = torch.compile(model, dynamic=False, backend=args.backend)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        length = random.choice(range(8, 200, 4))  # ragged batches, no padding to a bucket
        tokens = torch.randint(0, 1000, (8, length), device=args.device)
        logits = step_model(tokens)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"step {step} length {length} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
