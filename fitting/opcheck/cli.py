"""`python -m fitting.opcheck OP [SPEC]`: the report card of an op against its built-in twin.

Exit status: 0 when no check fails, 1 when one does, 2 for a SPEC that cannot run as OP.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from fitting.opcheck.card import markdown, run_card, summary, table
from models.ops.choice import OPS, SPEC_HELP, OpSpecError, check_op, resolve_op


def default_out(op: str, spec: str) -> Path:
    """outputs/opcheck/<op>-<spec>, the spec made filename-safe."""
    return Path("outputs") / "opcheck" / f"{op}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', spec)}"


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run the card, print it and write DIR/opcheck.md; the exit status."""
    parser = argparse.ArgumentParser(prog="python -m fitting.opcheck", description=__doc__)
    parser.add_argument("op", choices=sorted(OPS), help="the app op to check")
    parser.add_argument("spec", nargs="?", default="custom", help=f"{SPEC_HELP} (default custom)")
    parser.add_argument("--out", type=Path, help="directory for opcheck.md "
                        "(default outputs/opcheck/<op>-<spec>)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="smaller sizes, shorter runs")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--backend", default="aot_eager", help="torch.compile backend")
    args = parser.parse_args(argv)
    try:
        resolved = resolve_op(args.op, args.spec)
        check_op(args.op, resolved.fn, args.spec, device=args.device)
    except OpSpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    card = run_card(resolved, args.quick, args.device, args.backend)
    print(f"opcheck {resolved.key}\n{card.setting}\n\n{table(card)}\n\n{summary(card)}")
    out = args.out or default_out(args.op, args.spec)
    out.mkdir(parents=True, exist_ok=True)
    command = "python -m fitting.opcheck " + " ".join(sys.argv[1:] if argv is None else argv)
    (out / "opcheck.md").write_text(markdown(card, command))
    print(f"written to {out / 'opcheck.md'}")
    return 1 if card.failed else 0
