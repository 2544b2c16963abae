"""ResNet from torchvision, fed the way ImageNet training feeds it: JPEG decode and augmentation
in two DataLoader workers.

Each example is a JPEG (a bank of 32 smooth synthetic photos of 500 x 375 px, encoded once),
decoded with PIL and passed through torchvision's training transform (RandomResizedCrop,
horizontal flip, ToTensor, Normalize) in the workers; the step is the torchvision model in
bf16 autocast on CUDA with SGD and momentum, as the reference recipe trains it. Two workers
decode slower than the GPU steps: on an H100/H200 the default (ResNet-50, 64 images) waits
for its input, about 120-150 ms a step. The known answer: input pipeline.

    PYTHONPATH=examples perflab diagnose realmodels.resnet:make_step --budget 60s
"""

from __future__ import annotations

import io
from functools import lru_cache

import torch
import torch.nn.functional as F
from bottlenecks import sized
from torch.utils.data import DataLoader, Dataset, default_collate

from perflab.workloads import Workload
from realmodels import library

SIZES = {"cuda": dict(arch="resnet50", photo=(500, 375), crop=224, batch=64, workers=2),
         "cpu": dict(arch="resnet18", photo=(160, 120), crop=64, batch=8, workers=1)}
CLASSES = 1000


def jpeg_bank(count: int, size: tuple[int, int], seed: int) -> list[bytes]:
    """``count`` JPEGs of ``size`` px: low-frequency colour fields (photo-like, so they
    compress and decode as photos do, unlike noise), quality 90."""
    from PIL import Image

    g = torch.Generator().manual_seed(seed)
    w, h = size
    bank = []
    for _ in range(count):
        coarse = torch.rand(1, 3, h // 25, w // 25, generator=g)
        field = F.interpolate(coarse, size=(h, w), mode="bicubic").clamp(0, 1)
        pixels = (field[0].permute(1, 2, 0) * 255).to(torch.uint8).numpy()
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
        bank.append(buf.getvalue())
    return bank


class JpegImages(Dataset):
    """``n`` examples: a JPEG from the bank, decoded and put through ``transform``, and a class."""

    def __init__(self, n: int, bank: list[bytes], transform, seed: int):
        g = torch.Generator().manual_seed(seed + 1)
        self.labels = torch.randint(0, CLASSES, (n,), generator=g)
        self.bank, self.transform, self.n = bank, transform, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        from PIL import Image

        photo = Image.open(io.BytesIO(self.bank[i % len(self.bank)])).convert("RGB")
        return self.transform(photo), int(self.labels[i])


def make_step(device, *, arch=None, photo=None, crop=None, batch=None, workers=None,
              bf16=None, lr: float = 0.1, seed: int = 0) -> Workload:
    torchvision = library("torchvision", "resnet")
    from torchvision import transforms as T

    s = sized(device, SIZES, dict(arch=arch, photo=photo, crop=crop, batch=batch,
                                  workers=workers))
    device = torch.device(device)
    bf16 = device.type == "cuda" if bf16 is None else bf16
    torch.manual_seed(seed)
    model = getattr(torchvision.models, s["arch"])(num_classes=CLASSES).to(device)
    augment = T.Compose([T.RandomResizedCrop(s["crop"]), T.RandomHorizontalFlip(), T.ToTensor(),
                         T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])
    data = JpegImages(4096, jpeg_bank(32, tuple(s["photo"]), seed), augment, seed)
    loader = DataLoader(data, batch_size=s["batch"], shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(seed),
                        num_workers=s["workers"], persistent_workers=s["workers"] > 0,
                        pin_memory=device.type == "cuda")

    def train_step(model, optimizer, batch):
        images, labels = (t.to(device, non_blocking=True) for t in batch)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        return loss.detach()

    @lru_cache(maxsize=4)
    def make_batch(b: int):
        return tuple(default_collate([data[i] for i in range(b)]))

    return Workload(
        name="resnet", model=model, loader=loader, train_step=train_step,
        make_batch=make_batch, loss_fn=F.cross_entropy, batch_size=s["batch"],
        description=f"torchvision {s['arch']}, {s['batch']} JPEGs {s['photo'][0]}x"
                    f"{s['photo'][1]} decoded and augmented by {s['workers']} workers"
                    + (", bf16 autocast" if bf16 else ""),
        make_optimizer=lambda ps: torch.optim.SGD(ps, lr=lr, momentum=0.9, weight_decay=1e-4),
        optimizer_name="SGD", params={**s, "bf16": bf16, "lr": lr})
