"""The op library: custom autograd Functions, their functional aliases and built-in twins.

The app's ops are in this package; `models.ops.exhibits` holds the teaching exhibits (cube,
mul_constant, legendre_p3_numpy, ScalarTensor, once_differentiable, relu_cpp), which no
training run needs, so they are imported from there.
"""

from .fused_conv_bn import FusedConvBN2dFunction, fused_conv_bn2d, fused_conv_bn2d_builtin
from .legendre import LegendreP3, legendre_p3, legendre_p3_builtin
from .linear import LinearFn, linear, linear_builtin
from .memory import SavedBytes, saved_tensor_bytes
from .relu import ReLUFn, relu_masked
from .relu_output import ReLUOutputFn, relu
