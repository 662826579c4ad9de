"""`python -m fitting.opcheck SLOT [SPEC] [--ref REF]`: the report card of an op against a
reference (the slot's built-in twin unless --ref); `any SPEC --ref REF --shape 64,8` (or
`--inputs module:fn`) cards an op with no slot.

Exit status: 0 when nothing is wrong, 1 when something is, 2 for a SPEC or REF that cannot run
(or an op that exits or hangs).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch

from fitting.opcheck import card as card_mod
from fitting.opcheck.anyop import any_entry, load_samples, shape_samples
from fitting.opcheck.card import (
    CardAborted,
    markdown,
    run_card,
    summary,
    table,
    title,
    verdict_table,
)
from fitting.opcheck.subject import Subject
from models.ops.choice import OPS, SPEC_HELP, OpSpecError, check_op, resolve_callable, resolve_op

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def default_out(op: str, spec: str) -> Path:
    """outputs/opcheck/<op>-<spec>, the spec made filename-safe."""
    return Path("outputs") / "opcheck" / f"{op}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', spec)}"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fitting.opcheck", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("op", choices=[*sorted(OPS), "any"], help="the slot the op fills, or any")
    p.add_argument("spec", nargs="?", default="custom",
                   help=f"{SPEC_HELP}, or <module>:<name>(kw=value, ...) (default custom)")
    p.add_argument("--ref", help="the reference, in SPEC's forms (default builtin, the twin)")
    p.add_argument("--shape", help="any: one tensor input of this shape, e.g. 64,8")
    p.add_argument("--inputs", help="any: <module>:<fn> returning [(args, kwargs), ...]")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                   help="the dtype of the first parity rows and the calling cases")
    p.add_argument("--rtol", type=float, help="relative tolerance, for approximate ops")
    p.add_argument("--atol", type=float, help="absolute tolerance, for approximate ops")
    p.add_argument("--out", type=Path, help="directory for opcheck.md "
                   "(default outputs/opcheck/<op>-<spec>)")
    p.add_argument("--quick", action="store_true", help="smaller sizes, shorter runs")
    p.add_argument("--device", default="cpu")
    p.add_argument("--backend", default="aot_eager", help="torch.compile backend")
    return p  # fmt: skip


def _device(text: str) -> torch.device:
    try:
        device = torch.device(text)
    except RuntimeError as err:
        raise OpSpecError(f"--device {text}: {err}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise OpSpecError(f"--device {text}: this torch ({torch.__version__}) sees no CUDA "
                          "device; use --device cpu")  # fmt: skip
    return device


def _as_ref(op: str, spec: str, resolve):
    try:
        return resolve()
    except OpSpecError as err:
        raise OpSpecError(str(err).replace(f"ops.{op}={spec}", f"--ref {spec}", 1)) from None


def _subject(args, device: torch.device):
    """(Subject, the op resolved, its reference resolved) from the command line."""
    dtype, tol = DTYPES[args.dtype], (args.rtol, args.atol)
    common = {"quick": args.quick, "device": device, "backend": args.backend, "dtype": dtype,
              "tol": tol}  # fmt: skip
    if args.op != "any":
        if args.shape or args.inputs:
            raise OpSpecError(f"--shape and --inputs are for `any`; the slot {args.op} has its "
                              "own inputs")  # fmt: skip
        ref_spec = args.ref or "builtin"
        resolved = resolve_op(args.op, args.spec)
        ref = _as_ref(args.op, ref_spec, lambda: resolve_op(args.op, ref_spec))
        check_op(args.op, resolved.fn, args.spec, dtype=dtype, device=device)
        _as_ref(args.op, ref_spec,
                lambda: check_op(args.op, ref.fn, ref_spec, dtype=dtype, device=device))
        s = Subject(args.op, args.spec, resolved.fn, OPS[args.op], ref=ref.fn,
                    ref_spec=ref_spec, **common)  # fmt: skip
        return s, resolved, ref
    if not args.ref or not (args.shape or args.inputs):
        raise OpSpecError(f"any {args.spec}: an op with no slot needs --ref <module>:<name> and "
                          "its inputs, --shape 64,8 or --inputs <module>:<fn>")  # fmt: skip
    resolved = resolve_callable("any", args.spec, "my_ops:my_fn")
    ref = _as_ref("any", args.ref, lambda: resolve_callable("any", args.ref, "torch:softmax"))
    samples = (shape_samples(args.shape) if args.shape
               else load_samples(args.inputs, card_mod.CALL_TIMEOUT))  # fmt: skip
    entry, extra = any_entry(resolved.fn, ref.fn, samples, device, dtype)
    s = Subject("any", args.spec, entry.custom, entry, ref=entry.builtin, ref_spec=args.ref,
                extra_cases=extra, **common)  # fmt: skip
    return s, resolved, ref


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run the card, print it and write DIR/opcheck.md; the exit status."""
    args = _parser().parse_args(argv)
    try:
        s, resolved, ref = _subject(args, _device(args.device))
        card = run_card(s, ref if args.ref else None, resolved)
    except (OpSpecError, CardAborted) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    mark = "WRONG" if card.failed else "PASS"
    print(f"opcheck {title(card)}\n{card.setting}\n\n{table(card)}\n\nVerdict:\n\n"
          f"{verdict_table(card)}\n\n{mark}: {summary(card)}")  # fmt: skip
    out = args.out or default_out(args.op, args.spec)
    out.mkdir(parents=True, exist_ok=True)
    command = "python -m fitting.opcheck " + " ".join(sys.argv[1:] if argv is None else argv)
    (out / "opcheck.md").write_text(markdown(card, command))
    print(f"written to {out / 'opcheck.md'}")
    return 1 if card.failed else 0
