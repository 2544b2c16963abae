"""Train and keep every step's loss for a plot at the end.

Known answer: memory grows every step. The monitoring forward runs without torch.no_grad(),
and `history.append(val)` keeps its result: through it, its autograd graph and the
activations that graph saved, every step.
"""
import argparse

import torch
from torch import nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()

    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 512)).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x_val = torch.randn(args.batch_size, 512, device=args.device)
    history = []
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 512, device=args.device)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        val = model(x_val).pow(2).mean()  # monitoring, but without torch.no_grad()
        history.append(val)  # the bug: keeps val's graph (and its activations) every step
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    print("final", torch.stack(history).mean().item())


if __name__ == "__main__":
    main()
