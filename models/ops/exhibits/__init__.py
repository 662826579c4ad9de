"""Teaching exhibits no training run needs: one autograd pattern each, tested like the ops."""

from .cube import Cube, cube
from .legendre_numpy import legendre_p3_numpy, legendre_p3_numpy_backward
from .mul_constant import MulConstant, mul_constant
from .once_differentiable import once_differentiable
from .scalar_tensor import ScalarTensor
