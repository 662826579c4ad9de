"""Each kind of op in tests/opcheck/kinds.py through the card (its verdict, its exit
status, never a traceback) and through the app (`python train.py`: it runs, with one note line
where the op differs from its contract, or it is refused in one line before anything is
written), and the card and the app agreeing, as docs/ops.md's rule says."""

import pytest
import torch

from fitting.opcheck import boundary, cli
from fitting.opcheck.cli import main
from fitting.opcheck.precheck import OpRefused, decide, precheck
from fitting.slots import resolve
from tests.opcheck import kinds

K = "tests.opcheck.kinds:"


@pytest.fixture(autouse=True)
def _quick_rows(request, monkeypatch):
    """The cost and trains-the-same rows take seconds: stubbed unless a test trains."""
    monkeypatch.setattr(cli, "cost", lambda *a, **k: ("measured", "not measured here"))
    if "trained" not in request.fixturenames:
        monkeypatch.setattr(cli, "trains", lambda *a, **k: ("n/a", "not trained here"))


@pytest.fixture
def trained():
    """The trains-the-same row as the card runs it (--quick)."""


def card(capsys, *argv):
    code = main([*argv, "--no-compile", "--quick"])
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return code, out.out + out.err


def status(text: str, use: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(use))[17:40].strip()


# slot, op, the card's exit status and training row, what it says; what the app does (run,
# note, refuse) and what its line says
KINDS = [
    ("activation", "CheckpointedSiLU", 0, "note", "note: backward runs once per forward", "run",
     ""),
    ("activation", "ReLUNegatesInputInBackward", 1, "wrong", "x, as the mlp calls it: it changes "
     "x in place in its backward, behind autograd's back", "refuse", "wrong for training: x, as "
     "the mlp calls it: it changes x in place in its backward"),
    ("activation", "SymQuant8", 0, "note", "its gradient is not its forward's derivative (a "
     "straight-through or surrogate gradient?): gradcheck (float64) fails", "note", "its gradient "
     "is not its forward's derivative (a straight-through or surrogate gradient?)"),
    ("activation", "LowerBoundZero", 1, "wrong", "x, as the mlp calls it: gradient of x at", "note",
     "it differs from its contract: x, as the mlp calls it: gradient of x at"),
    ("linear", "Int8WeightLinear", 1, "wrong", "no gradient for weight, so weight would never "
     "train", "note", "it differs from its contract: x 2-D, as the models call it: no gradient "
     "for weight, so weight would never train"),
    ("activation", "SiLUFloat32", 0, "note", "note: it computes in float32 on float64 inputs: its "
     "checks ran at that precision", "run", ""),
    ("activation", "sinh", 0, "pass", "forward and gradients run", "run", ""),
]
IDS = [k[1] for k in KINDS]


@pytest.mark.parametrize(("slot", "op", "code", "training", "says", "app", "app_says"), KINDS,
                         ids=IDS)
def test_the_card_judges_each_kind(capsys, slot, op, code, training, says, app, app_says):
    got, out = card(capsys, slot, K + op)
    assert got == code and status(out, "training") == training and says in out, out


@pytest.mark.parametrize(("slot", "op", "code", "training", "says", "app", "app_says"), KINDS,
                         ids=IDS)
def test_the_app_runs_notes_or_refuses_each_kind(train_cli, tmp_path, slot, op, code, training,
                                                 says, app, app_says):
    run_dir = tmp_path / "run"
    done = train_cli("task=mlp", "optimizer=adam", f"ops.{slot}={K}{op}", "steps=2",
                     f"hydra.run.dir={run_dir}")
    if app == "refuse":
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(f"config error: ops.{slot}={K}{op}: {app_says}")
        assert not run_dir.exists()
        return
    assert done.returncode == 0, done.stderr
    notes = [line for line in (done.stdout + done.stderr).splitlines() if "note: ops." in line]
    assert len(notes) == (app == "note"), notes
    if notes:
        assert f"note: ops.{slot}={K}{op}: {app_says}" in notes[0]
        assert notes[0].endswith(f"(the card: python -m fitting.opcheck {slot} {K}{op})")
        assert "exact" not in done.stdout + done.stderr and "identical" not in done.stderr


@pytest.mark.parametrize(("slot", "op", "code", "training", "says", "app", "app_says"), KINDS,
                         ids=IDS)
def test_the_card_and_the_app_agree(capsys, slot, op, code, training, says, app, app_says):
    """The app's action is decide()'s on the card's own training row, and its line carries the
    card's finding."""
    main([slot, K + op, "--no-compile", "--quick"])
    out = capsys.readouterr().out
    fn = resolve(slot, K + op)
    try:
        note = precheck(slot, fn, device="cpu", dtype=torch.float32)
    except OpRefused as err:
        action, line = "refuse", str(err)
    else:
        action, line = ("note", note) if note else ("run", "")
    assert action == app
    found = [(s.split(":")[0].strip(), t.strip()) for s, t in (
        (x[17:40] if x.startswith("training") else x.split(":", 1)[0],
         x[40:] if x.startswith("training") else x.split(":", 1)[1])
        for x in out.split("\ntraining", 1)[1].split("\nsecond order")[0].splitlines()[1:])]
    main_line = next(x for x in out.splitlines() if x.startswith("training"))
    assert decide("training", [(main_line[17:40].strip(), main_line[40:]), *found])[1] == app
    if app != "run":
        assert main_line[40:].split(";")[0] in line or any(t.split(";")[0] in line
                                                            for _, t in found), (line, out)


def test_a_tensor_an_op_was_given_and_changes_in_its_backward_is_named(capsys):
    code, out = card(capsys, "any", K + "RoPENegatesSin", "--ref", K + "rope", "--inputs",
                     K + "rope_samples")
    assert code == 1 and status(out, "training") == "wrong", out
    assert "sample 0: it changes sin in place in its backward, behind autograd's back: every " \
           "later use of sin gets the changed values" in out


def test_a_slow_first_call_has_its_own_limit_card_and_app(capfd, train_cli, tmp_path,
                                                          monkeypatch):
    monkeypatch.setitem(kinds.SLOW_FIRST, "seconds", 3.0)
    monkeypatch.setitem(kinds.SLOW_FIRST, "called", False)
    code, out = card(capfd, "activation", K + "relu_slow_first", "--limit", "2")
    assert code == 0, out  # its first call took 3 s, under the first call's limit
    monkeypatch.setitem(kinds.SLOW_FIRST, "called", False)
    code, out = card(capfd, "activation", K + "relu_slow_first", "--first-limit", "0.5")
    assert code == 2 and out.count("\n") == 1, out
    assert out.startswith(f"error: ops.activation={K}relu_slow_first: calling it on x, as the "
                          "mlp calls it: its first call did not return within 0.5 s (the limit "
                          "of a first call, which may compile: --first-limit, op_first_limit_s)")
    assert "endless loop" not in out
    monkeypatch.setitem(kinds.SLOW_FIRST, "called", False)
    done = train_cli("task=mlp", f"ops.activation={K}relu_slow_first", "op_first_limit_s=0.5",
                     f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 2 and "its first call did not return within 0.5 s" in done.stderr
    assert not (tmp_path / "run").exists()
    monkeypatch.setitem(kinds.SLOW_FIRST, "called", False)
    done = train_cli("task=mlp", f"ops.activation={K}relu_slow_first", "op_limit_s=2",
                     "steps=2", f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 0, done.stderr
    assert boundary.LIMIT_S == 30 and boundary.FIRST_LIMIT_S == 300  # put back after


def test_an_op_returning_float32_in_a_float64_run_cannot_run_in_card_and_app(capfd, train_cli,
                                                                            tmp_path):
    code, out = card(capfd, "activation", K + "SiLUFloat32", "--dtype", "float64")
    assert code == 2 and "it returns tensor (4, 8) float32 on x" in out, out
    done = train_cli("task=mlp", f"ops.activation={K}SiLUFloat32", "dtype=float64",
                     f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 2 and "it returns tensor (4, 8) float32 on x" in done.stderr


@pytest.mark.parametrize(("use", "name"), [("forward_ad", "forward AD"),
                                           ("training", "training")])
def test_a_row_that_cannot_run_says_so_and_the_others_answer(capsys, monkeypatch, use, name):
    def broken(*args):
        raise RuntimeError("a check no one foresaw failed")

    monkeypatch.setitem(cli.judge.__globals__["ROWS"], use, broken)
    code, out = card(capsys, "activation", "custom")
    assert code == 2 and status(out, name) == "cannot run", out
    assert "RuntimeError: a check no one foresaw failed" in out
    assert status(out, "second order") == "pass" and out.endswith(f"exit 2: cannot run for "
                                                                  f"{name}\n")
    with pytest.raises(OpRefused, match=f"cannot run for {name}: RuntimeError: a check no one"):
        precheck("activation", torch.relu, device="cpu", dtype=torch.float32,
                 uses=("training", use))


def test_an_op_returning_float32_for_float64_inputs_is_judged_at_float32(capsys):
    code, out = card(capsys, "any", K + "SiLUFloat32", "--ref", "torch.nn.functional:silu",
                     "--shape", "4,8", "--dtype", "float64")
    assert code == 0 and status(out, "training") == "note", out  # no dtype error as a verdict
    assert "forward and gradients as the reference's on 3 samples; gradcheck (float32)" in out
    assert "note: it computes in float32 on float64 inputs: its checks ran at that precision" in out
    assert "gradgradcheck (float32): analytical = numerical" in out


def test_trains_the_same_gives_no_verdict_where_the_reference_diverges(capsys, trained):
    code, out = card(capsys, "activation", K + "sinh", "--ref", "torch:sinh")
    assert code == 0, out
    assert status(out, "trains the same") == "n/a"
    assert "no verdict: the reference itself diverges (a final loss is not finite)" in out


def test_a_different_gradient_where_the_values_agree_is_wrong_though_it_trains_the_same(
        capsys, monkeypatch):
    monkeypatch.setattr(cli, "trains", lambda *a, **k: ("pass", "the same within the seed spread"))
    code, out = card(capsys, "activation", K + "LowerBoundZero")
    assert code == 1 and status(out, "training") == "wrong", out
    assert "approximate" not in out
    code, out = card(capsys, "linear", K + "Int8WeightLinear")  # approximate values, but no
    assert code == 1 and status(out, "training") == "wrong", out  # gradient for its weight
