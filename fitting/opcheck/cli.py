"""python -m fitting.opcheck SLOT [SPEC] [--ref SPEC]: the graded card of an op against its
reference (the slot's built-in twin unless --ref), one verdict per use; `any SPEC --ref SPEC
--shape 64,8 | --inputs module:fn` cards an op with no slot. A SPEC is custom, builtin,
<module>:<name>, or Hydra's {_target_:<module>.<name>,_partial_:true,<arg>:<value>}.

Exit status: 0 nothing wrong, 1 something wrong (or a note, with --strict), 2 the op cannot run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from fitting import slots, verdict
from fitting.opcheck import rows
from fitting.precheck import TOL, OpRefused

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
          "float16": torch.float16}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fitting.opcheck", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("slot", choices=[*slots.SLOTS, "any"], help="the slot the op fills, or any")
    p.add_argument("spec", nargs="?", default="custom", help="the op (default custom)")
    p.add_argument("--ref", help="the reference, a SPEC too (default builtin, the slot's twin)")
    p.add_argument("--shape", help="any: one input tensor of this shape, e.g. 64,8")
    p.add_argument("--inputs", help="any: <module>:<fn> returning [(args, kwargs), ...]; "
                   "the tensors that require grad are the ones that train")
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--rtol", type=float, help="relative tolerance (an approximate op)")
    p.add_argument("--atol", type=float, help="absolute tolerance (an approximate op)")
    p.add_argument("--strict", action="store_true", help="a note fails the card too")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile row")
    p.add_argument("--backend", default="aot_eager", help="torch.compile backend")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", type=Path, help="also write the card to OUT/opcheck.md")
    return p


def parse_spec(text: str):
    """A SPEC as Hydra parses the value of an override: a string, or a dict for {...}."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_override(f"op={text}").value()
    except Exception:
        raise OpRefused(f"{text}: not a SPEC in Hydra's override syntax: custom, builtin, "
                                "<module>:<name> or '{_target_:<module>.<name>,_partial_:true,"
                                "<arg>:<value>}' (quoted in a shell)") from None


def _any_samples(args, dtype, device) -> list[verdict.Sample]:
    """--shape: one tensor (and its edge values); --inputs: the samples a function returns."""
    if args.shape:
        try:
            shape = tuple(int(n) for n in args.shape.split(","))
        except ValueError:
            raise OpRefused(f"--shape {args.shape}: expected sizes, e.g. 64,8") from None
        x = torch.randn(shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        n = x.numel()
        edges = {"x = 0, -0, ±1e-3, ±1.5": [0.0, -0.0, 1e-3, -1e-3, 1.5, -1.5],
                 "x = ±inf, NaN": [torch.inf, -torch.inf, torch.nan]}
        cases = {"x": x + 0.1 * x.sign(), **{k: torch.tensor(v * n)[:n].reshape(shape)
                                            for k, v in edges.items()}}
        return [(k, (t.to(device, dtype).requires_grad_(),), {}, True) for k, t in cases.items()]
    made = _resolve("any", args.inputs, f"--inputs {args.inputs}")()
    if not (isinstance(made, list) and made and all(len(s) == 2 for s in made)):
        raise OpRefused(f"--inputs {args.inputs}: expected a list of (args, kwargs)")
    samples = [(f"sample {i}", tuple(a), dict(k), True) for i, (a, k) in enumerate(made)]
    if not any(t.requires_grad for _, t in verdict.tensors(samples[0][1:3], "")):
        raise OpRefused(f"--inputs {args.inputs}: no tensor of sample 0 requires grad; "
                                "mark the ones that train with .requires_grad_()")
    return samples


def _resolve(slot: str, spec, key: str):
    """The callable a SPEC names (fitting.slots.resolve); OpRefused naming `key` if none."""
    try:
        return slots.resolve(slot, spec, key)
    except ValueError as err:
        raise OpRefused(str(err)) from None


def _setup(args):
    """(title, op, reference, samples, parameter names) from the command line."""
    dtype, device = DTYPES[args.dtype], torch.device(args.device)
    spec, ref_spec = parse_spec(args.spec), parse_spec(args.ref or "builtin")
    if args.slot == "any":
        if not args.ref or not (args.shape or args.inputs):
            raise OpRefused("any: give --ref and --shape 64,8 or --inputs <module>:<fn>")
        samples, ours = _any_samples(args, dtype, device), None
        title = f"any {slots.describe(spec)}"
    else:
        entry = slots.SLOTS[args.slot]
        samples, ours = entry.samples(dtype, device), entry.ours
        title = f"ops.{args.slot}={slots.describe(spec)}"
    fn = _resolve(args.slot, spec, title)
    ref = _resolve(args.slot, ref_spec, f"--ref {slots.describe(ref_spec)}")
    names = verdict.param_names(fn, ref, *([ours] if ours else []))
    twin = f" ({slots.SLOTS[args.slot].twin.__name__})" if ref_spec == "builtin" else ""
    title += f" against {slots.describe(ref_spec)}{twin}, {args.dtype} on {device}"
    return title, fn, ref, samples, names


def card(fn, ref, samples: list[verdict.Sample], names: list[str], tol, backend: str | None
         ) -> dict[str, list[verdict.Finding]]:
    """Each use's findings: training, second order, forward AD, compiles, torch.library."""
    training = verdict.judge_training(fn, ref, samples, names, tol)
    training.append(rows.gradcheck(fn, ref, samples[0], names))
    first_wrong = any(s == "wrong" for s, _ in training)
    second = [("not judged", "while first order (training) is wrong")] if first_wrong \
        else verdict.judge_derivatives("second_order", fn, ref, samples[0], names, tol)
    return {
        "training": training, "second order": second,
        "forward AD": verdict.judge_derivatives("forward_ad", fn, ref, samples[0], names, tol),
        "compiles": [rows.compiles(fn, samples[0], names, tol, backend) if backend
                     else ("n/a", "not tried (--no-compile)")],
        "torch.library": [rows.library_opcheck(fn, samples[0])],
    }


def render(title: str, found: dict[str, list[verdict.Finding]], strict: bool) -> tuple[str, int]:
    """The card as printed, and its exit status."""
    out, worst = [title], {}
    for use, findings in found.items():
        worst[use] = max((s for s, _ in findings), key=verdict.RANK.index)
        calm = worst[use] in ("pass", "note", "same as the reference")
        main = [t for s, t in findings if s == "pass"] if calm else []
        main = main or [next(t for s, t in findings if s == worst[use])]
        out.append(f"{use:<14} {worst[use]:<22} {'; '.join(main)}")
        out += [f"  {s}: {t}" for s, t in findings if t not in main]
    wrong = [u for u, s in worst.items() if s == "wrong"]
    notes = sum(s == "note" for f in found.values() for s, _ in f)
    code = 1 if wrong or (strict and notes) else 0
    said = f"wrong for {', '.join(wrong)}" if wrong else "nothing wrong"
    note = f"{notes} note{'s' * (notes != 1)}" + ("" if strict else " (--strict fails on notes)")
    out.append(f"exit {code}: {said}" + (f"; {note}" if notes else ""))
    return "\n".join(out), code


def main(argv: list[str] | None = None) -> int:
    """Run the card from the command line; print it; the exit status."""
    args = _parser().parse_args(argv)
    try:
        title, fn, ref, samples, names = _setup(args)
        rtol, atol = TOL[DTYPES[args.dtype]]
        tol = (rtol if args.rtol is None else args.rtol, atol if args.atol is None else args.atol)
        try:
            found = card(fn, ref, samples, names, tol, None if args.no_compile else args.backend)
        except verdict.CannotRun as err:
            raise OpRefused(f"{title.split(' against ')[0]}: {err}") from None
    except OpRefused as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except SystemExit as err:  # an op's own sys.exit, outside the checked calls
        print(f"error: the op called sys.exit({err.code!r})", file=sys.stderr)
        return 2
    text, code = render(title, found, args.strict)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "opcheck.md").write_text(f"```\n{text}\n```\n")
    return code
