"""python -m fitting.opcheck SLOT [SPEC] [--ref SPEC]: the graded card of an op against its
reference, one verdict per use, what it costs, and whether the slot's task trains the same with
it. Without --ref, a slot's op is judged against the slot's built-in twin where it computes the
twin, else against itself. `any SPEC --ref SPEC --shape 64,8 | --inputs module:fn` cards an op
with no slot. A SPEC is custom, builtin, <module>:<name>, or Hydra's
{_target_:<module>.<name>,_partial_:true,<arg>:<value>}.

Exit status: 0 nothing wrong, 1 something wrong (or a note, with --strict), 2 the op cannot run
(it raises, returns the wrong thing, hangs, exits; or --device is not available).
"""

import argparse
import sys
from pathlib import Path

import torch

from fitting import slots
from fitting.opcheck import boundary, verdict
from fitting.opcheck.boundary import CannotRun, OpRefused, line, param_names, resolve
from fitting.opcheck.cost import cost
from fitting.opcheck.precheck import decide
from fitting.opcheck.trains import trains
from fitting.opcheck.uses import NAMES, judge, library_opcheck, row, slot_case

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
          "float16": torch.float16}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fitting.opcheck", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("slot", choices=[*slots.SLOTS, "any"], help="the slot the op fills, or any")
    p.add_argument("spec", nargs="?", default="custom", help="the op (default custom)")
    p.add_argument("--ref", help="the reference, a SPEC too (default: the slot's twin)")
    p.add_argument("--shape", help="any: one input tensor of this shape, e.g. 64,8")
    p.add_argument("--inputs", help="any: <module>:<fn> returning [(args, kwargs), ...]; "
                   "the tensors that require grad are the ones that train")
    p.add_argument("--train-in", choices=slots.SLOTS, help="any: train it in this slot's task")
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--rtol", type=float, help="relative tolerance (an approximate op)")
    p.add_argument("--atol", type=float, help="absolute tolerance (an approximate op)")
    p.add_argument("--strict", action="store_true", help="a note fails the card too")
    p.add_argument("--quick", action="store_true", help="fewer seeds and steps, less timing")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile row")
    p.add_argument("--backend", default="aot_eager", help="torch.compile backend")
    p.add_argument("--device", default="cpu")
    p.add_argument("--limit", type=float, default=boundary.LIMIT_S, help="seconds a call may take")
    p.add_argument("--first-limit", type=float, default=boundary.FIRST_LIMIT_S,
                   help="seconds the op's first call may take (it may compile)")
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
        cases = {"x": x + 0.1 * x.sign(), **{k: torch.tensor(v * n)[:n].reshape(shape)
                                            for k, v in slots.EDGES.items()}}
        return [(k, (t.to(device, dtype).requires_grad_(),), {}, True) for k, t in cases.items()]
    made = resolve("any", args.inputs, f"--inputs {args.inputs}")()
    if not (isinstance(made, list) and made and all(len(s) == 2 for s in made)):
        raise OpRefused(f"--inputs {args.inputs}: expected a list of (args, kwargs)")
    samples = [(f"sample {i}", tuple(a), dict(k), True) for i, (a, k) in enumerate(made)]
    if not any(t.requires_grad for _, t in verdict.tensors(samples[0][1:3], "")):
        raise OpRefused(f"--inputs {args.inputs}: no tensor of sample 0 requires grad; "
                        "mark the ones that train with .requires_grad_()")
    return samples


def _device(text: str) -> torch.device:
    """--device, if this machine has it."""
    try:
        device = torch.device(text)
        torch.empty(1, device=device)
    except Exception as err:
        raise OpRefused(f"--device {text}: not available here: {line(err)}") from None
    return device


def _setup(args) -> tuple[str, str, verdict.Case]:
    """(the op's key, the title, the case) from the command line."""
    dtype, device = DTYPES[args.dtype], _device(args.device)
    spec, ref_spec = parse_spec(args.spec), parse_spec(args.ref or "builtin")
    key = f"{'any ' if args.slot == 'any' else f'ops.{args.slot}='}{slots.describe(spec)}"
    fn = resolve(args.slot, spec, key, device)
    ref = resolve(args.slot, ref_spec, f"--ref {slots.describe(ref_spec)}") if args.ref else None
    if args.slot == "any":
        if not ref or not (args.shape or args.inputs):
            raise OpRefused("any: give --ref and --shape 64,8 or --inputs <module>:<fn>")
        case = verdict.Case(fn, ref, ref, _any_samples(args, dtype, device),
                            param_names(fn, ref), verdict.TOL[dtype])
    else:
        try:
            case = slot_case(args.slot, fn, dtype, device, ref)
        except CannotRun as err:
            raise OpRefused(f"{key}: {err}") from None
    twin = slots.SLOTS.get(args.slot, slots.SLOTS["activation"]).twin.__name__
    against = f"builtin ({twin})" if ref_spec == "builtin" else slots.describe(ref_spec)
    if case.ref is fn and not ref:
        against = f"itself (it does not compute {twin}; --ref names a reference)"
    rtol, atol = case.tol
    case.tol = (rtol if args.rtol is None else args.rtol, atol if args.atol is None else args.atol)
    return key, f"{key} against {against}, {args.dtype} on {device}", case


def card(case: verdict.Case, args) -> dict[str, list[verdict.Finding]]:
    """Each row's findings: the uses (uses.py), torch.library, cost, trains the same."""
    uses = ("training", "second_order", "forward_ad", *(() if args.no_compile else ("compiles",)))
    found = {NAMES[u]: f for u, f in judge(case, uses, args.backend).items()}
    found.setdefault("compiles", [("n/a", "not tried (--no-compile)")])
    found["torch.library"] = row(library_opcheck, case.fn, case.samples[0])
    slot = args.train_in or (args.slot if args.slot != "any" else None)
    where = DTYPES[args.dtype], torch.device(args.device)
    slow = boundary.interpreted(case.fn)  # timed on the card's own sample: the model's size
    big = slots.SLOTS[args.slot].samples(*where, big=True)[0] if args.slot != "any" and \
        not slow else case.samples[0]  # would take the interpreter minutes a call
    ref = case.ref if case.ref is not case.fn else slots.SLOTS[slot].twin if slot else case.ref
    found["cost"] = row(cost, case.fn, ref, big, case.names, "the reference" if ref is case.ref
                        else "the twin", 0.1 if args.quick or slow else 0.3, slow)
    found["trains the same"] = [("n/a", "no slot to train it in (--train-in SLOT names one)")
                                ] if not slot else [("n/a", "no reference: give --ref")] \
        if case.ref is case.fn else row(trains, slot, case.fn, case.ref, *where, args.quick, slow)
    return _approximate(found, case.samples[0][0])


def _approximate(found: dict[str, list[verdict.Finding]], first: str) -> dict:
    """An op whose values are off beyond the tolerance on the inputs the model trains on (the
    first sample), whose gradient is its forward's derivative (gradcheck), and that trains the
    same, is approximate: those value differences are notes. A gradient that differs where the
    values agree, or a difference elsewhere only (an edge value), stays wrong."""
    off = [t for s, t in found["training"] if s == "wrong" and verdict.OFF in t]
    own = not any(s == "wrong" and t.startswith("gradcheck") for s, t in found["training"])
    if found["trains the same"][0][0] == "pass" and own and \
            any(t.startswith(f"{first}: forward at") for t in off):
        found["training"] = [("note", f"approximate, and it trains the same: {t}") if t in off
                             else (s, t) for s, t in found["training"]]
    return found


def render(title: str, found: dict[str, list[verdict.Finding]], strict: bool) -> tuple[str, int]:
    """The card as printed, and its exit status."""
    out, worst = [title], {}
    for use, findings in found.items():
        worst[use] = decide(use, findings)[0]
        calm = worst[use] in ("pass", "note", "same as the reference")
        main = [t for s, t in findings if s == "pass"] if calm else []
        main = main or [next(t for s, t in findings if s == worst[use])]
        out.append(f"{use:<16} {worst[use]:<22} {'; '.join(main)}")
        out += [f"  {s}: {t}" for s, t in findings if t not in main]
    wrong = [u for u, s in worst.items() if s == "wrong"]
    stuck = [u for u, s in worst.items() if s == "cannot run"]
    notes = sum(s == "note" for f in found.values() for s, _ in f)
    code = 2 if stuck else 1 if wrong or (strict and notes) else 0
    said = "; ".join([f"cannot run for {', '.join(stuck)}"] * bool(stuck) + [
        f"wrong for {', '.join(wrong)}" if wrong else "nothing wrong"] * bool(wrong or not stuck))
    note = f"{notes} note{'s' * (notes != 1)}" + ("" if strict else " (--strict fails on notes)")
    out.append(f"exit {code}: {said}" + (f"; {note}" if notes else ""))
    return "\n".join(out), code


def main(argv: list[str] | None = None) -> int:
    """Run the card from the command line; print it; the exit status."""
    args = _parser().parse_args(argv)
    try:
        with boundary.limits(args.limit, args.first_limit):
            key, title, case = _setup(args)
            found = card(case, args)
    except OpRefused as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except CannotRun as err:
        print(f"error: {key}: {err}", file=sys.stderr)
        return 2
    text, code = render(title, found, args.strict)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "opcheck.md").write_text(f"```\n{text}\n```\n")
    return code
