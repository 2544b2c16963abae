"""Train a small MLP on a dataset whose __getitem__ is slow (decoding, augmentation).

Known answer: input pipeline. num_workers=0, so the loop waits for every batch.
"""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __init__(self, n, dim, delay_ms):
        self.n, self.dim, self.delay = n, dim, delay_ms / 1e3

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.delay)  # stands for JPEG decoding and augmentation
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.dim, generator=g), i % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--delay-ms", type=float, default=1.0)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()

    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(args.device)
    loader = DataLoader(SlowDataset(4096, 64, args.delay_ms), batch_size=args.batch_size,
                        shuffle=True, num_workers=args.workers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(loader):
            x, y = x.to(args.device), y.to(args.device)
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 50 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
