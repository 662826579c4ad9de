"""The report card of an op: python -m fitting.opcheck SLOT SPEC (see docs/ops.md)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def clash() -> str | None:
    """One line naming a file of the user's that hides the lab's package of its name, if any."""
    for name in ("models", "fitting"):
        spec = importlib.util.find_spec(name)
        origin = Path(spec.origin).resolve() if spec and spec.origin else None
        if origin and origin != ROOT / name / "__init__.py":
            return (f"error: your {origin} hides the lab's package {name!r} from the card; rename "
                    f"it (e.g. my_{name}.py) and name your op by the new module")
    return None
