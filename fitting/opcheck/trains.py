"""The card's trains-the-same row: the slot's task trained over a few seeds with the op in its
slot and with the reference (ours in the other slots), a short run each with plain SGD, judged
by fitting.compare.seeds' rule."""

import math
from collections.abc import Callable

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from fitting.compare.seeds import trains_same
from fitting.config import REPO_ROOT, register
from fitting.loop import Closure
from fitting.opcheck.boundary import guarded
from fitting.opcheck.verdict import Finding
from fitting.slots import SLOTS
from fitting.tasks import TASKS

SEEDS = 5


def curve(cfg, ops: dict[str, Callable], seed: int, steps: int, dtype: torch.dtype, device
          ) -> list[float]:
    """The training loss at each step of one seed's run of the task with `ops` in its slots."""
    torch.manual_seed(seed)  # the model's initialization
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
    task = next(t for t in TASKS.values() if slot in t.slots)  # the smallest that calls it
    register()
    with initialize_config_dir(str(REPO_ROOT / "conf"), version_base="1.3"):  # as train.py does
        cfg = compose("config", [f"task={task.name}", "optimizer=sgd", *task.card[1]])
    seeds, steps = (3, task.card[0] // (10 if interpreted else 2)) if quick or interpreted \
        else (SEEDS, task.card[0])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the models are tiny: a second thread only adds sync cost
    try:
        ours = {s: SLOTS[s].ours for s in task.slots}
        mine, theirs = ([curve(cfg, ours | {slot: f}, s, steps, dtype, device)
                         for s in range(seeds)] for f in (fn, ref))
    finally:
        torch.set_num_threads(threads)
    fewer = ", fewer under Triton's interpreter" * interpreted
    protocol = f"({task.name}: {steps} steps of SGD at lr {cfg.optimizer.lr:g}, seeds " \
        f"0-{seeds - 1}{fewer})"
    first, last = (sorted(c[i] for c in theirs)[seeds // 2] for i in (0, -1))  # medians
    if not (finite := all(math.isfinite(c[-1]) for c in theirs)) or not last < first:
        why = "does not learn (its loss does not fall)" if finite else \
            "diverges (a final loss is not finite)"
        return "n/a", f"no verdict: the reference itself {why} {protocol}"
    verdict, text = trains_same([c[-1] for c in mine], [c[-1] for c in theirs], mine == theirs)
    status = {"identical": "pass", "same": "pass", "differs": "wrong"}.get(verdict, "note")
    return status, f"{text} {protocol}"
