"""fuse_conv_bn(model): each Conv2d whose output only a BatchNorm2d reads becomes one
FusedConvBN2d, found in the dataflow torch.fx traces, nested blocks included."""

import warnings
from collections import Counter

from torch import fx, nn

from .layers import FusedConvBN2d, Op
from .ops import fused_conv_bn2d


class _Tracer(fx.Tracer):
    """Traces into containers only: a module without children holds no pair, and our layers'
    ops (autograd Functions) cannot take fx's proxies."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return (isinstance(m, FusedConvBN2d) or not any(m.children())
                or super().is_leaf_module(m, qualname))


def fuse_conv_bn(model: nn.Module, op: Op = fused_conv_bn2d) -> nn.Module:
    """Replace, in place, each nn.Conv2d (no bias, zero padding) whose output goes to one
    nn.BatchNorm2d and nowhere else by a FusedConvBN2d of the two modules (same parameters,
    buffers and state_dict values, keys under the conv's name), and the BatchNorm2d by
    nn.Identity; returns `model`. A module torch.fx cannot trace keeps its own pairs (with a
    warning naming it) and has its submodules fused one by one."""
    if isinstance(model, FusedConvBN2d):
        return model
    try:
        graph = _Tracer().trace(model)
    except Exception as err:  # noqa: BLE001 - fx raises many kinds on untraceable code
        if any(type(m) is nn.BatchNorm2d for m in model.children()):
            warnings.warn(f"fuse_conv_bn: torch.fx cannot trace {type(model).__name__}"
                          f" ({type(err).__name__}: {str(err).strip().splitlines()[0]});"
                          " its own Conv2d→BatchNorm2d pairs stay as they are, its submodules"
                          " are fused one by one", stacklevel=2)
        for child in model.children():
            if any(child.children()):
                fuse_conv_bn(child, op)
        return model
    for conv_name, bn_name in _pairs(model, graph):
        conv, bn = model.get_submodule(conv_name), model.get_submodule(bn_name)
        model.set_submodule(conv_name, FusedConvBN2d.from_pair(conv, bn, op=op))
        model.set_submodule(bn_name, nn.Identity())
    return model


def _pairs(model: nn.Module, graph: fx.Graph) -> list[tuple[str, str]]:
    """(conv, bn) names where the graph feeds that conv's output to that bn alone, each once."""
    modules = dict(model.named_modules())
    calls = Counter(n.target for n in graph.nodes if n.op == "call_module")
    pairs = []
    for bn_node in graph.nodes:
        if bn_node.op != "call_module" or type(modules[bn_node.target]) is not nn.BatchNorm2d:
            continue
        conv_node = bn_node.args[0] if len(bn_node.args) == 1 and not bn_node.kwargs else None
        if not (isinstance(conv_node, fx.Node) and conv_node.op == "call_module"
                and len(conv_node.users) == 1):
            continue
        conv = modules[conv_node.target]
        if (type(conv) is nn.Conv2d and conv.bias is None and conv.padding_mode == "zeros"
                and calls[conv_node.target] == calls[bn_node.target] == 1):
            pairs.append((conv_node.target, bn_node.target))
    return pairs
