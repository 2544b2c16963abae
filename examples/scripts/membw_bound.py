"""A normalization-and-activation block on large activations with a handful of weights.

Known answer: memory bandwidth. Every operator streams the whole activation through memory
and does a few FLOPs per element (arithmetic intensity far below the ridge point).
"""
import argparse

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        for _ in range(4):
            x = x - x.mean(-1, keepdim=True)
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
            x = nn.functional.gelu(x * self.gain + self.bias)
        return x


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()

    model = Block(args.dim).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(args.rows, args.dim, device=args.device)
    for step in range(args.steps):
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
