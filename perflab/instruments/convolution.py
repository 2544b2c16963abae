"""The convolutions a step runs, and a convolution of the same size to time as their ceiling.

A matmul ceiling is the wrong yardstick for a convolution: cuDNN picks its own algorithms
(implicit GEMM, Winograd, FFT), runs TF32 by default on CUDA
(``torch.backends.cudnn.allow_tf32``) where the matmuls may not, and reaches another rate
at another shape. R01 therefore records each forward convolution the step runs
(:class:`ConvCall`, seen by :class:`perflab.instruments.precision.PrecisionFlops` at the
ATen level), takes the one that does the most work, and times that very call (and its
backward, which computes the input's and the weight's gradients) at the step's batch and
at larger batches: the best rate is the convolution ceiling its phases' convolution FLOPs
are judged against. The FLOPs of each timed call are counted by the same counter as the
step's, so the ceiling and the counted work agree by construction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

#: the ATen forward convolutions whose arguments describe the call
FORWARD = ("convolution", "_convolution")
#: what a timed convolution computes: the forward, or the backward (input and weight grads)
DIRECTIONS = ("forward", "backward")


@dataclass(frozen=True)
class ConvCall:
    """One forward convolution's arguments, as aten.convolution takes them."""

    input: tuple[int, ...]
    weight: tuple[int, ...]
    bias: bool
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    transposed: bool
    output_padding: tuple[int, ...]
    groups: int
    channels_last: bool = False

    @classmethod
    def from_args(cls, args: Any) -> ConvCall:
        x, w, b, stride, padding, dilation, transposed, output_padding, groups = args[:9]
        last = x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(
            memory_format=torch.channels_last)
        return cls(tuple(x.shape), tuple(w.shape), b is not None, tuple(stride),
                   tuple(padding), tuple(dilation), bool(transposed), tuple(output_padding),
                   int(groups), last)

    def batched(self, scale: int) -> ConvCall:
        """The same convolution on ``scale`` times the batch."""
        from dataclasses import replace

        return replace(self, input=(self.input[0] * scale, *self.input[1:]))

    def shape(self) -> str:
        """"[N, C, H, W] * [K, C/g, R, S] stride s pad p" for a row's input_shape."""
        extra = "" if self.stride == (1,) * len(self.stride) else f" stride {list(self.stride)}"
        extra += "" if not any(self.padding) else f" pad {list(self.padding)}"
        extra += f" groups {self.groups}" if self.groups != 1 else ""
        extra += " channels_last" if self.channels_last else ""
        return f"{list(self.input)} * {list(self.weight)}{extra}"


def conv_op(call: ConvCall, direction: str, dtype: torch.dtype, device: torch.device
            ) -> Callable[[], Any]:
    """One call of ``call`` in ``dtype`` on ``device``: the forward, or the backward (the
    gradients of the input and the weight from a gradient of the output). Operands drawn on
    the device (seeded)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r}: one of {DIRECTIONS}")
    g = torch.Generator(device=device).manual_seed(0)
    fmt = torch.channels_last if call.channels_last else torch.contiguous_format

    def draw(shape):
        return torch.randn(shape, generator=g, device=device).to(dtype=dtype,
                                                                 memory_format=fmt
                                                                 if len(shape) == 4
                                                                 else torch.preserve_format)

    x, w = draw(call.input), draw(call.weight)
    b = torch.zeros(call.weight[1 if call.transposed else 0] * (call.groups if call.transposed
                                                                  else 1),
                    device=device, dtype=dtype) if call.bias else None
    args = (list(call.stride), list(call.padding), list(call.dilation), call.transposed,
            list(call.output_padding), call.groups)
    if direction == "forward":
        return lambda: torch.ops.aten.convolution(x, w, b, *args)
    grad = draw(tuple(torch.ops.aten.convolution(x, w, b, *args).shape))
    bias_sizes = None if b is None else list(b.shape)
    return lambda: torch.ops.aten.convolution_backward(grad, x, w, bias_sizes, *args,
                                                       [True, True, call.bias])


def heaviest(convs: dict[ConvCall, int]) -> ConvCall | None:
    """The convolution that did the most FLOPs in the step (all its calls together)."""
    return max(convs, key=convs.get) if convs else None
