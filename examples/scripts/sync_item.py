"""Classify with a running accuracy read on the host every step.

Known answer on CUDA: synchronization. `loss.item()` and the boolean-mask select
`logits[mask]` each make the host wait for the device every step. On a CPU there is no
device queue: the reads are free, and perflab only locates them (their lines).
"""
import argparse

import torch
from torch import nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()

    model = nn.Sequential(nn.Linear(256, args.hidden), nn.GELU(),
                          nn.Linear(args.hidden, args.hidden), nn.GELU(),
                          nn.Linear(args.hidden, 10)).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=args.device.startswith("cuda"))
    x = torch.randn(args.batch_size, 256, device=args.device)
    y = torch.randint(0, 10, (args.batch_size,), device=args.device)
    total, correct = 0.0, 0
    for step in range(args.steps):
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.item()  # a host read every step
        confident = logits[logits.softmax(-1).amax(-1) > 0.5]  # a data-dependent shape
        correct += int(confident.shape[0])
        if step % 100 == 0:
            print(f"step {step} mean loss {total / (step + 1):.4f} confident {correct}")


if __name__ == "__main__":
    main()
