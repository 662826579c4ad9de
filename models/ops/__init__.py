"""The ops: custom autograd Functions, each with a PyTorch twin computing the same thing.

Twins: linear ~ torch.nn.functional.linear, relu/relu_masked ~ torch.relu,
legendre_p3 ~ legendre_p3_reference, fused_conv_bn2d ~ conv_bn_reference. The teaching
exhibits, which no training run needs, are in `models.ops.exhibits`.
"""

from ._function import unwrap
from .fused_conv_bn import FusedConvBN2dFunction, conv_bn_reference, fused_conv_bn2d
from .legendre import LegendreP3, legendre_p3, legendre_p3_reference
from .linear import LinearFn, linear
from .memory import SavedBytes, saved_tensor_bytes
from .relu import ReLUFn, ReLUMaskedFn, relu, relu_masked
