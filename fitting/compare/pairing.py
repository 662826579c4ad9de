"""Which runs compare: groups of runs that differ only in their op choices, and in each group
the reference run against which every other run ("mine") is paired."""

from __future__ import annotations

from fitting.compare.runs_reader import REPEAT_KEYS, Run


def group_runs(runs: list[Run]) -> list[list[Run]]:
    """Runs grouped by config without `impl` and `ops` (and volatile keys), in order of first
    appearance."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.comparison_key(), []).append(run)
    return list(groups.values())


def repeat_groups(groups: list[list[Run]]) -> list[list[list[Run]]]:
    """The comparison groups gathered by config without the repeat keys (the seed): the groups
    of one experiment repeated with several seeds, drawn as one row of the figure."""
    rows: dict[str, list[list[Run]]] = {}
    for group in groups:
        rows.setdefault(group[0].comparison_key(REPEAT_KEYS), []).append(group)
    return list(rows.values())


def differing_choices(group: list[Run]) -> set[str]:
    """The op slots (and `impl`) whose choice is not the same in every run of the group."""
    slots = {slot for run in group for slot in run.choices}
    return {slot for slot in slots if len({run.choices.get(slot) for run in group}) > 1}


def _reference_rank(run: Run, slots: set[str]) -> tuple[int, int]:
    """Higher is more of a reference: its differing ops built-in first, then torch functions."""
    builtin = sum(run.choices.get(slot) == "builtin" for slot in slots)
    return builtin, len(run.torch_choices & slots)


def pair_runs(group: list[Run]) -> tuple[list[tuple[Run, Run]], list[Run]]:
    """(mine, reference) pairs of one group (in job order) and the unpaired rest.

    The reference is the run whose differing op is `builtin`, else a torch function
    (`torch.…`), else the first in job order; every run with other choices pairs with it. Runs
    with the same choices as the reference (a repeated job) pair with the others in order."""
    known = [r for r in group if not r.impl.startswith("?")]
    slots = differing_choices(known)
    if not slots:
        return [], list(group)
    best = max(_reference_rank(r, slots) for r in known)
    reference = next(r for r in known if _reference_rank(r, slots) == best)
    refs = [r for r in known if r.choices == reference.choices]
    others = [r for r in known if r.choices != reference.choices]
    if len(refs) == 1:
        pairs = [(other, reference) for other in others]
    else:
        pairs = list(zip(others, refs, strict=False))
    paired = {id(r) for pair in pairs for r in pair}
    return pairs, [r for r in group if id(r) not in paired]
