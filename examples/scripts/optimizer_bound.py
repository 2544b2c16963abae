"""A model of many small parameters (per-feature adapters), stepped by a per-parameter Adam.

Known answer: optimizer. `foreach=False` runs Adam's dozen operations once per parameter
(hundreds of tiny tensors), so the optimizer step outweighs forward and backward.
"""
import argparse

import torch
from torch import nn


class Adapters(nn.Module):
    def __init__(self, n, dim):
        super().__init__()
        self.scales = nn.ParameterList(nn.Parameter(torch.ones(dim)) for _ in range(n))
        self.head = nn.Linear(dim, 1)

    def forward(self, x):
        s = torch.stack(list(self.scales)).prod(0)  # every parameter in one op
        return self.head(x * s)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--params", type=int, default=600)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()

    model = Adapters(args.params, 8).to(args.device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=False)
    x, y = torch.randn(32, 8, device=args.device), torch.randn(32, 1, device=args.device)
    for step in range(args.steps):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 200 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
