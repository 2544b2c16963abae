"""Which precision each counted FLOP ran in, and the ceiling a mix of precisions has.

Under autocast a float32 model's matmuls run in bfloat16 or float16: at the ATen level
(below autocast's cast) their operands have that dtype. A float32 matmul on CUDA runs TF32
where torch allows it (``torch.backends.cuda.matmul.allow_tf32`` or a float32 matmul
precision other than "highest"; convolutions: ``torch.backends.cudnn.allow_tf32``). The
ceiling of a phase is then not one dtype's: :class:`PrecisionFlops` counts each FLOP under
the precision its operands had, and :func:`blend` gives the rate the phase would reach at
each precision's ceiling, the FLOP-weighted harmonic mean (the time of each part at its
ceiling, summed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from perflab.instruments import convolution

#: the precisions a matmul ceiling is measured for: strict float32 (TF32 off), TF32 (CUDA),
#: bfloat16, float16
PRECISIONS = ("float32", "tf32", "bfloat16", "float16")
_CONVOLUTIONS = ("convolution", "_convolution", "convolution_backward", "cudnn_convolution")
#: the key a convolution's FLOPs are counted under: its own ceiling, not a matmul's
CONV_PREFIX = "conv_"


def conv_key(prec: str) -> str:
    """The key of convolution FLOPs that ran in ``prec`` ("conv_tf32")."""
    return CONV_PREFIX + prec


def split_key(key: str) -> tuple[str, str]:
    """("convolution" or "matmul", the precision) of a counted key."""
    if key.startswith(CONV_PREFIX):
        return "convolution", key.removeprefix(CONV_PREFIX)
    return "matmul", key


def tf32_applies(kind: str, device_type: str) -> bool:
    """Does a float32 ``kind`` ("matmul" or "convolution") run TF32 on this device now?"""
    if device_type != "cuda":
        return False
    try:
        if kind == "convolution":
            return bool(torch.backends.cudnn.allow_tf32)
        return bool(torch.backends.cuda.matmul.allow_tf32
                    or torch.get_float32_matmul_precision() != "highest")
    except RuntimeError:  # torch's per-operation fp32_precision API was mixed in
        obj = (torch.backends.cudnn.conv if kind == "convolution"
               else torch.backends.cuda.matmul)
        return getattr(obj, "fp32_precision", "ieee") == "tf32"


def tf32_modes(device_type: str) -> dict[str, bool]:
    """The TF32 mode of each kind, for the contract's record."""
    return {k: tf32_applies(k, device_type) for k in ("matmul", "convolution")}


@contextmanager
def tf32_on() -> Iterator[None]:
    """TF32 on for cuBLAS matmuls and cuDNN convolutions inside; the flags as they were after."""
    conv, mm = torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision()
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(mm)
        torch.backends.cudnn.allow_tf32 = conv


def precision_of(func_packet: Any, args: Any) -> str:
    """The precision an operation's FLOPs run in: its first floating tensor operand's dtype,
    float32 read as "tf32" where TF32 applies to it."""
    tensors = [t for t in tree_flatten(args)[0]
               if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not tensors:
        return "float32"
    t = tensors[0]
    name = str(t.dtype).removeprefix("torch.")
    if name == "float32":
        kind = ("convolution" if getattr(func_packet, "__name__", "") in _CONVOLUTIONS
                else "matmul")
        if tf32_applies(kind, t.device.type):
            return "tf32"
    return name


class PrecisionFlops(FlopCounterMode):
    """torch's flop counter, each FLOP also counted under its precision (``by_precision``;
    a convolution's under :func:`conv_key`), and each forward convolution's arguments with
    the FLOPs it did (``convs``: the sizes a convolution ceiling is timed at)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(display=False, **kw)
        self.by_precision: Counter = Counter()
        self.convs: Counter = Counter()

    def _count_flops(self, func_packet, out, args, kwargs):  # torch's hook, per counted op
        if func_packet in self.flop_registry:
            flops = int(self.flop_registry[func_packet](*args, **kwargs, out_val=out))
            name = getattr(func_packet, "__name__", "")
            key = precision_of(func_packet, args)
            if name in _CONVOLUTIONS:
                key = conv_key(key)
            if name in convolution.FORWARD:
                self.convs[convolution.ConvCall.from_args(args)] += flops
            self.by_precision[key] += flops
        return super()._count_flops(func_packet, out, args, kwargs)


def blend(flops: Mapping[str, int], ceilings: Mapping[str, float | None]
          ) -> tuple[float | None, str]:
    """(the FLOP-weighted ceiling of a mix, FLOP/s; "" or why there is none).

    sum(flops) / sum(flops_p / ceiling_p): the rate at which the mix would run were each
    part at its own precision's ceiling. None where a precision that ran has no ceiling.
    """
    ran = {p: f for p, f in flops.items() if f}
    if not ran:
        return None, "no counted FLOPs"
    missing = [p for p in ran if not ceilings.get(p)]
    if missing:
        return None, (f"no {', '.join(missing)} ceiling measured (the step runs it; conv_: "
                      "a convolution's)")
    return sum(ran.values()) / sum(f / ceilings[p] for p, f in ran.items()), ""


def describe(flops: Mapping[str, int]) -> str:
    """The mix in a phrase: "bfloat16 97%, float32 3%"."""
    total = sum(flops.values())
    if not total:
        return "no counted FLOPs"
    return ", ".join(f"{p} {100 * f / total:.0f}%"
                     for p, f in sorted(flops.items(), key=lambda kv: -kv[1]) if f)
