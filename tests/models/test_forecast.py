"""Forecaster runs the ops its five slot keywords name; with the twins in every slot it computes
the loss, gradients and logits that it computes with ours; RMSNorm is nn.RMSNorm with an op."""

import pytest
import torch
from torch import nn

import models.ops as O
from models.forecast import Forecaster
from models.layers import RMSNorm
from tests.ops.helpers import DEVICES

TWINS = {"norm": O.rms_norm_reference, "glu": O.swiglu_reference, "rope": O.rope_reference,
         "attention": O.attention_reference,
         "cross_entropy": O.linear_cross_entropy_reference}


@pytest.mark.parametrize("device", DEVICES)
def test_forecaster_with_ours_equals_forecaster_with_the_twins(device):
    ids = torch.randint(0, 64, (3, 9), generator=torch.Generator().manual_seed(0)).to(device)
    results = []
    for ops in ({}, TWINS):
        torch.manual_seed(0)
        model = Forecaster(vocab=64, context=8, width=16, heads=2, device=device,
                           dtype=torch.float64, **ops)
        loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        results.append([loss.detach(), model.logits(ids[:, :-1]),
                        *(p.grad for p in model.parameters())])
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got, want)
    assert results[0][1].shape == (3, 64)  # the next token's logits, for decoding


def test_forecaster_calls_the_op_in_each_slot():
    calls = []

    def spy(twin):
        def op(*args):
            calls.append(twin)
            return twin(*args)
        return op
    model = Forecaster(vocab=32, context=4, width=8, depth=1, heads=2,
                       **{slot: spy(twin) for slot, twin in TWINS.items()})
    model(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long))
    assert set(calls) == set(TWINS.values())


def test_rms_norm_layer_equals_nn_rms_norm():
    x = torch.randn(4, 8, dtype=torch.float64)
    ours, theirs = RMSNorm(8, dtype=torch.float64), nn.RMSNorm(8, eps=1e-6, dtype=torch.float64)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    torch.testing.assert_close(ours(x), theirs(x))
