"""A deep, narrow recurrent-style cell applied many times on a tiny batch.

Known answer: host launch & Python overhead. Each operator works on a few hundred numbers;
the per-operator cost of dispatching it (and, on CUDA, launching it) fills the step.
"""
import argparse

import torch
from torch import nn


class Cell(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.w = nn.Linear(dim, dim)

    def forward(self, h, depth):
        for _ in range(depth):
            h = torch.tanh(self.w(h)) * 0.5 + h * 0.5
        return h


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--depth", type=int, default=64)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()

    model = Cell(16).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    h0 = torch.randn(4, 16, device=args.device)
    for step in range(args.steps):
        loss = model(h0, args.depth).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 200 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
