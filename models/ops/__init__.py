"""The ops: custom autograd Functions, each with a PyTorch twin computing the same thing.

Twins: linear ~ torch.nn.functional.linear, relu/relu_masked ~ torch.relu,
legendre_p3 ~ legendre_p3_reference, fused_conv_bn2d ~ conv_bn_reference; the transformer's
rms_norm, swiglu, rope, attention, linear_cross_entropy ~ their `*_reference`. The teaching
exhibits, which no training run needs, are in `models.ops.exhibits`.
"""

from ._function import unwrap
from .attention import AttentionFn, attention, attention_formula, attention_reference
from .cross_entropy import linear_cross_entropy, linear_cross_entropy_reference
from .fused_conv_bn import FusedConvBN2dFunction, conv_bn_reference, fused_conv_bn2d
from .legendre import LegendreP3, legendre_p3, legendre_p3_reference
from .linear import LinearFn, linear
from .memory import SavedBytes, saved_tensor_bytes
from .relu import ReLUFn, ReLUMaskedFn, relu, relu_masked
from .rms_norm import RMSNormFn, rms_norm, rms_norm_reference
from .rope import RoPEFn, rope, rope_reference, rope_tables
from .swiglu import SwiGLUFn, swiglu, swiglu_reference
