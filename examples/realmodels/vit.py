"""A Vision Transformer from timm, trained in fp32 on images a DataLoader's workers serve.

``timm.create_model`` (no pretrained weights), images held as uint8 and scaled to floats by
the dataset (a decoded dataset's last step), 4 workers with pinned memory, AdamW, no autocast
(timm's default training is fp32 unless ``--amp``). On an H100/H200 the default (ViT-B/16,
48 images of 224 px) steps in about 50 ms.

    PYTHONPATH=examples perflab diagnose realmodels.vit:make_step --budget 60s
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from bottlenecks import sized
from torch.utils.data import DataLoader, Dataset, default_collate

from perflab.workloads import Workload
from realmodels import library

SIZES = {"cuda": dict(arch="vit_base_patch16_224", image=224, batch=48, workers=4),
         "cpu": dict(arch="vit_tiny_patch16_224", image=64, batch=8, workers=0)}
CLASSES = 1000


class DecodedImages(Dataset):
    """``n`` images (a bank of 64 distinct uint8 images, seeded) with a class each, served as
    floats normalized the way timm's default transform leaves them."""

    def __init__(self, n: int, image: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.bank = torch.randint(0, 256, (64, 3, image, image), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, CLASSES, (n,), generator=g)
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        x = self.bank[i % len(self.bank)].float().div_(255).sub_(0.5).div_(0.5)
        return x, int(self.labels[i])


def make_step(device, *, arch=None, image=None, batch=None, workers=None, lr: float = 1e-3,
              seed: int = 0) -> Workload:
    timm = library("timm", "vit")
    s = sized(device, SIZES, dict(arch=arch, image=image, batch=batch, workers=workers))
    device = torch.device(device)
    torch.manual_seed(seed)
    model = timm.create_model(s["arch"], pretrained=False, num_classes=CLASSES,
                              img_size=s["image"]).to(device)
    data = DecodedImages(2048, s["image"], seed)
    loader = DataLoader(data, batch_size=s["batch"], shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(seed),
                        num_workers=s["workers"], persistent_workers=s["workers"] > 0,
                        pin_memory=device.type == "cuda")

    @lru_cache(maxsize=4)
    def make_batch(b: int):
        return tuple(default_collate([data[i] for i in range(b)]))

    return Workload(
        name="vit", model=model, loader=loader, make_batch=make_batch,
        loss_fn=F.cross_entropy, batch_size=s["batch"],
        description=f"timm {s['arch']}, {s['batch']} images {s['image']} px, fp32, "
                    f"{s['workers']} loader workers",
        make_optimizer=lambda ps: torch.optim.AdamW(ps, lr=lr, weight_decay=0.05),
        optimizer_name="AdamW", params={**s, "lr": lr})
