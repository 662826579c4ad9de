"""torch.compile (inductor, CPU) of models built on the custom ops: one graph, equal to eager."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from models.conv_bn import FusedConvBN2d
from models.layers import Linear, ReLU
from models.poly3 import Poly3

pytestmark = pytest.mark.slow


def _loss_and_grads(model: nn.Module, forward) -> tuple[torch.Tensor, list[torch.Tensor]]:
    x = torch.linspace(-math.pi, math.pi, 2000, dtype=torch.float64)
    model.zero_grad()
    loss = (forward(x) - torch.sin(x)).square().sum()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def _check_compiled_equals_eager(impl: str) -> None:
    torch._dynamo.reset()
    model = Poly3(0.1, -1.0, 0.2, 0.3, impl=impl, dtype=torch.float64)
    eager = _loss_and_grads(model, model)
    compiled = _loss_and_grads(model, torch.compile(model, fullgraph=True, backend="inductor"))
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-12, atol=0)
    torch.testing.assert_close(compiled[1], eager[1], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("p3_name", ("builtin", "custom"))
def test_fullgraph_compile_matches_eager(p3_name):
    _check_compiled_equals_eager(p3_name)


@pytest.mark.parametrize("impl", ("custom", "builtin"))
def test_mlp_of_custom_layers_compiles_without_graph_breaks(impl):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(Linear(1, 16, impl=impl), ReLU(impl=impl), Linear(16, 1, impl=impl))
    x = torch.randn(64, 1)
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(model, fullgraph=True)
    results = []
    for forward in (model, compiled):
        model.zero_grad()
        loss = forward(x).square().mean()
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    torch.testing.assert_close(results[1][0], results[0][0])
    for g_compiled, g_eager in zip(results[1][1], results[0][1], strict=True):
        torch.testing.assert_close(g_compiled, g_eager)


def test_fused_conv_bn_compiles_and_updates_running_stats_like_eager():
    """The fused op mutates running_mean/running_var in forward: compiled, the same updates."""
    states = []
    for compile_it in (False, True):
        torch._dynamo.reset()
        torch.manual_seed(0)
        layer = FusedConvBN2d(3, 4, 3, padding=1).train()
        forward = torch.compile(layer, fullgraph=True, backend="aot_eager") if compile_it else layer
        x = torch.randn(2, 3, 8, 8)
        for _ in range(2):
            out = forward(x)
            out.square().sum().backward()
        states.append((out.detach(), layer.state_dict(), [p.grad for p in layer.parameters()]))
    (eager_out, eager_state, eager_grads), (out, state, grads) = states
    assert eager_state["1.num_batches_tracked"] == 2
    assert not torch.equal(eager_state["1.running_mean"], torch.zeros(4))
    torch.testing.assert_close(out, eager_out, rtol=0, atol=0)
    for key, value in eager_state.items():
        torch.testing.assert_close(state[key], value, rtol=0, atol=0, msg=key)
    for g, want in zip(grads, eager_grads, strict=True):
        torch.testing.assert_close(g, want, rtol=0, atol=0)
