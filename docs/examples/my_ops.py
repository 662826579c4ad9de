"""README's `my_ops`: the ops its examples name, taken from the files beside this one. Put
this dir on the path, from the repository root:

    PYTHONPATH=docs/examples python train.py task=mlp ops.activation=my_ops:swish
    PYTHONPATH=docs/examples python -m fitting.opcheck activation my_ops:swish \
        --ref torch.nn.functional:silu
"""

import functools

from layer_norm import layer_norm as my_layer_norm
from layer_norm import samples
from leaky import leaky_relu
from swish import Swish

swish = Swish.apply  # x·sigmoid(x), a torch.autograd.Function: torch's own is F.silu
leaky = functools.partial(leaky_relu, negative_slope=0.1)  # as README's --ref: F.leaky_relu, 0.1

__all__ = ["leaky", "my_layer_norm", "samples", "swish"]
