"""The fused conv-BN's backward in pieces that keep its peak memory low at large batches.

The backward holds grad_out throughout, so what aten's kernels allocate on top sets the peak:
- the conv's recompute: oneDNN may reorder the input into channel blocks (16 channels on
  AVX-512, 16x a 1-channel input's bytes); `conv_in_slices` runs it over batch slices.
- batch norm's backward: aten allocates grad_y and an input-sized temporary beside the conv
  output; `batch_norm_backward_into` turns that output into grad_y in place, slice by slice.
- the conv's backward: oneDNN copies grad_y into a workspace that grows with the batch;
  `conv_backward_in_slices` runs it over batch slices.
An activation of at most ONE_CALL_BYTES runs through aten's kernels in one call each, as the
pair does (its gradients exactly, and faster with a heap allocator); a larger one in slices of
at most SLICE_BYTES (below the default allocator's mmap threshold).
"""

import math

import torch

ONE_CALL_BYTES = 8 << 20
SLICE_BYTES = 2 << 20


def batch_slices(t: torch.Tensor) -> list[slice]:
    """Slices of `t`'s batch dim: all of it if `t` holds at most ONE_CALL_BYTES, else slices of
    at most SLICE_BYTES of `t` each (at least one row)."""
    return _slices(t.shape[0], t.numel() // t.shape[0] * t.element_size() if t.shape[0] else 0)


def _slices(n: int, sample_bytes: int) -> list[slice]:
    """batch_slices of a tensor of `n` samples of `sample_bytes` each."""
    if n * sample_bytes <= ONE_CALL_BYTES:
        return [slice(0, n)]
    rows = max(1, SLICE_BYTES // max(sample_bytes, 1))
    return [slice(start, start + rows) for start in range(0, n, rows)]


def conv_in_slices(x: torch.Tensor, weight: torch.Tensor, conv: tuple, sliced: bool = True
                   ) -> torch.Tensor:
    """torch.convolution(x, weight, None, *conv) (not transposed), over batch slices of the
    output as batch_slices cuts it (in one call unless `sliced`)."""
    stride, padding, dilation = conv[:3]
    spatial = [(size + 2 * p - d * (k - 1) - 1) // s + 1  # torch.nn.Conv2d's output size
               for size, k, s, p, d in zip(x.shape[2:], weight.shape[2:], stride, padding,
                                           dilation, strict=True)]
    sample_bytes = weight.shape[0] * math.prod(spatial) * x.element_size()
    parts = _slices(x.shape[0], sample_bytes)
    if len(parts) == 1 or not sliced:
        return torch.convolution(x, weight, None, *conv)
    y = None
    for part in parts:
        y_part = torch.convolution(x[part], weight, None, *conv)
        if y is None:
            y = _batch_like(y_part, x.shape[0])
        y[part] = y_part
    return y


def _batch_like(part: torch.Tensor, n: int) -> torch.Tensor:
    """An empty tensor of `n` samples shaped, typed and laid out as the batch slice `part`."""
    nhwc = part.is_contiguous(memory_format=torch.channels_last) and not part.is_contiguous()
    fmt = torch.channels_last if nhwc else torch.contiguous_format
    return torch.empty((n, *part.shape[1:]), dtype=part.dtype, device=part.device,
                       memory_format=fmt)


def batch_norm_backward_into(y: torch.Tensor, grad_out: torch.Tensor,
                             bn_weight: torch.Tensor | None, mean: torch.Tensor,
                             invstd: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Training-mode batch norm's backward: overwrite `y` (the conv output BN normalized with
    `mean` and `invstd`) with grad_y; return (grad_y, grad_bn_weight, grad_bn_bias). Not
    differentiable; float32/float64 only (it computes in `y`'s dtype, aten halves in float)."""
    shape = (1, -1, 1, 1)
    per_count = 1.0 / (y.numel() // y.shape[1])  # 1 / elements per channel
    grad_bias = torch.zeros_like(mean)
    dot = torch.zeros_like(mean)  # per channel: sum over (n, h, w) of grad_out * (y - mean)
    for part in batch_slices(y):  # a slice at a time, while it is in cache
        centered, grad = y[part].sub_(mean.view(shape)), grad_out[part]
        grad_bias += grad.sum((0, 2, 3), dtype=mean.dtype)
        dot += (grad * centered).sum((0, 2, 3), dtype=mean.dtype)
    grad_weight = dot * invstd
    scale = invstd if bn_weight is None else invstd * bn_weight
    # grad_y = scale * (grad_out - grad_bias / count - (y - mean) * invstd² * dot / count)
    centered_scale = -per_count * scale * invstd * invstd * dot
    shift = -per_count * scale * grad_bias
    torch.addcmul(shift.view(shape), y, centered_scale.view(shape), out=y)
    y.addcmul_(grad_out, scale.view(shape))
    return y, grad_weight, grad_bias


def conv_backward_in_slices(grad_y: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                            conv: tuple, need_x: bool, need_w: bool, sliced: bool = True
                            ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """aten's convolution_backward (grad_x, grad_w) over batch slices of grad_y (in one call
    unless `sliced`); `conv` is torch.convolution's trailing arguments."""
    mask = [need_x, need_w, False]
    parts = batch_slices(grad_y) if sliced else [slice(None)]
    if len(parts) == 1:
        gx, gw, _ = torch.ops.aten.convolution_backward(grad_y, x, weight, None, *conv, mask)
        return gx, gw
    grad_x = grad_w = None
    for part in parts:
        gx, gw, _ = torch.ops.aten.convolution_backward(grad_y[part], x[part], weight, None,
                                                        *conv, mask)
        if need_x:
            if grad_x is None:
                grad_x = _batch_like(gx, x.shape[0])
            grad_x[part] = gx
        if need_w:
            grad_w = gw if grad_w is None else grad_w + gw
    return grad_x, grad_w
