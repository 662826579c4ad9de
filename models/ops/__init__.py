"""The op library: custom autograd Functions, their functional aliases and built-in twins."""

from ._function import once_differentiable
from .cube import Cube, cube
from .fused_conv_bn import FusedConvBN2dFunction, fused_conv_bn2d, fused_conv_bn2d_builtin
from .legendre import LegendreP3, legendre_p3, legendre_p3_builtin
from .legendre_numpy import LegendreP3NumPy, legendre_p3_numpy
from .linear import LinearFn, linear, linear_builtin
from .memory import SavedBytes, saved_tensor_bytes
from .mul_constant import MulConstant, mul_constant
from .relu import ReLUFn, relu_masked
from .relu_output import ReLUOutputFn, relu
from .scalar_tensor import ScalarTensor
