"""torch.compile(fullgraph=True) of the models built on our ops: one graph, equal to eager."""

import pytest
import torch

from models.cnn import CurveCNN
from models.mlp import MLP
from models.poly3 import Poly3


def _loss_and_grads(model, forward, x):
    model.zero_grad()
    loss = forward(x).square().sum()
    loss.backward()
    return [loss.detach(), *(p.grad.clone() for p in model.parameters())]


@pytest.mark.parametrize(("build", "x"), [
    (lambda: Poly3(0.1, -1.0, 0.2, 0.3, dtype=torch.float64), torch.linspace(-3, 3, 100,
                                                                              dtype=torch.float64)),
    (lambda: MLP(1, (16,), 1), torch.randn(64, 1)),
    (lambda: CurveCNN(image_size=8, channels=(2,), hidden=4), torch.randn(4, 1, 8, 8)),
], ids=lambda v: type(v()).__name__ if callable(v) else "x")
def test_compiled_model_equals_eager_and_updates_the_same_running_stats(build, x):
    torch.compiler.reset()
    torch.manual_seed(0)
    model = build()
    eager = _loss_and_grads(model, model, x)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(0)
    model = build()
    # aot_eager: Dynamo's graph and AOTAutograd's joint graph, without inductor's codegen
    # (10-20 s a model on 2 cores, and not where our ops could break).
    forward = torch.compile(model, fullgraph=True, backend="aot_eager")
    compiled = _loss_and_grads(model, forward, x)
    for got, want in zip(compiled, eager, strict=True):
        torch.testing.assert_close(got, want)
    for key, value in state.items():  # the cnn's running stats and batch count
        torch.testing.assert_close(model.state_dict()[key], value, msg=key)


@pytest.mark.slow
def test_compile_true_in_the_app_puts_our_ops_in_dynamos_graph(train_cli, tmp_path, monkeypatch):
    # The app's torch.compile with a backend that keeps Dynamo's graphs and runs them as
    # traced (no inductor: seconds, not minutes). An op Dynamo cannot trace would run outside
    # the graph, between graph breaks: its forward would not be in any graph's bodies.
    graphs, compile_ = [], torch.compile

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    monkeypatch.setattr(torch, "compile", lambda model, **kw: compile_(model, backend=keep))
    done = train_cli("task=cnn", "compile=true", "steps=2", f"hydra.run.dir={tmp_path}")
    assert done.returncode == 0, done.stderr
    files = {node.meta.get("stack_trace", "").rsplit('File "', 1)[-1].split('"')[0]
             for gm in graphs for name, body in gm.named_children() if name.startswith("fwd_body")
             for node in body.graph.nodes}
    ours = {f.rsplit("/", 1)[-1] for f in files if "/models/ops/" in f}
    assert ours == {"fused_conv_bn.py", "relu.py", "linear.py"}
