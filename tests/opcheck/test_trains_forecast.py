"""Each of the forecast task's slots trains the same with ours as with its twin, by the card's
own trains-the-same row (quick: 3 seeds, half its steps of SGD); a gradient a tenth of the
right one, with the right forward, differs."""

import pytest
import torch

from fitting.opcheck.trains import trains
from fitting.slots import SLOTS
from fitting.tasks import TASKS
from models.ops import linear_cross_entropy


@pytest.mark.parametrize("slot", TASKS["forecast"].slots)
def test_ours_trains_the_same_as_the_twin(slot):
    status, text = trains(slot, SLOTS[slot].ours, SLOTS[slot].twin, torch.float32, "cpu",
                          quick=True)
    assert status == "pass" and "forecast: 20 steps of SGD at lr 0.3" in text, text


def test_a_cross_entropy_with_a_tenth_of_the_gradient_differs():
    def slow(x, weight, target):  # the same loss; its gradient scaled by 0.1
        return linear_cross_entropy(x * 0.1 + (x * 0.9).detach(),
                                    weight * 0.1 + (weight * 0.9).detach(), target)
    status, text = trains("cross_entropy", slow, SLOTS["cross_entropy"].twin, torch.float32,
                          "cpu", quick=True)
    assert status == "wrong" and "differs" in text, text
