"""The card's trains-the-same row: the slot's task trained over a few seeds with the op in its
slot and with the reference (ours in the other slots), a short run each with plain SGD, judged
by fitting.compare.seeds' rule."""

import math
from collections.abc import Callable

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from fitting.boundary import guarded
from fitting.compare.seeds import trains_same
from fitting.config import REPO_ROOT  # importing it registers the schemas conf/ needs
from fitting.loop import Closure
from fitting.slots import SLOTS
from fitting.verdict import Finding

STEPS = {"poly3": 100, "mlp": 300, "cnn": 20}  # short: by 300 steps relu/100 trains 3x worse
# mlp at a tenth of its SGD lr: early training, where every layer's gradient sets the pace (at
# 0.1 the last layer alone fits sin about as well); cnn: data for 20 steps of 32, not 8192.
PROTOCOL = {"mlp": ["optimizer.lr=0.01"], "cnn": ["task.n_train=640", "task.n_val=64"]}
SEEDS = 5


def curve(cfg, slot: str, fn: Callable, seed: int, steps: int, dtype: torch.dtype, device
          ) -> list[float]:
    """The training loss at each step of one seed's run with fn in `slot`."""
    ops = {s: SLOTS[s].ours for s in cfg.task.ops} | {slot: fn}
    task = instantiate(cfg.task, ops=ops, device=device, dtype=dtype, seed=seed, _convert_="all")
    noise = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # each seed its own start (poly3's is fixed): the task's, times 1 ± 1%
        for p in task.model.parameters():
            p.mul_(1 + 0.01 * torch.randn(p.shape, generator=noise, dtype=torch.float64).to(p))
    optimizer = instantiate(cfg.optimizer)(task.model.named_parameters())
    losses = []
    for step in range(steps):
        closure = Closure(task, task.model, task.batch(step), optimizer, check=False)
        with guarded():
            optimizer.step(closure)
        losses.append(closure.loss.item())
        if not math.isfinite(losses[-1]):
            break
    return losses


def trains(slot: str, fn: Callable, ref: Callable, dtype: torch.dtype, device,
           quick: bool = False, interpreted: bool = False) -> Finding:
    """The row: identical or the same within the seed spread (pass), or differs (wrong); an op
    under Triton's interpreter, a tenth of the steps (the card's time)."""
    task = SLOTS[slot].task
    with initialize_config_dir(str(REPO_ROOT / "conf"), version_base="1.3"):  # as train.py does
        cfg = compose("config", [f"task={task}", "optimizer=sgd", *PROTOCOL.get(task, [])])
    seeds, steps = (3, STEPS[task] // (10 if interpreted else 2)) if quick or interpreted \
        else (SEEDS, STEPS[task])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the models are tiny: a second thread only adds sync cost
    try:
        mine, theirs = ([curve(cfg, slot, f, s, steps, dtype, device) for s in range(seeds)]
                        for f in (fn, ref))
    finally:
        torch.set_num_threads(threads)
    verdict, text = trains_same([c[-1] for c in mine], [c[-1] for c in theirs], mine == theirs)
    status = {"identical": "pass", "same": "pass", "differs": "wrong"}.get(verdict, "note")
    fewer = ", fewer under Triton's interpreter" * interpreted
    return status, f"{text} ({task}: {steps} steps of SGD at lr {cfg.optimizer.lr:g}, seeds " \
        f"0-{seeds - 1}{fewer})"
