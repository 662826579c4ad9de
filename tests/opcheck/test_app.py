"""The app does what the card says: `python train.py ... ops.<slot>=<op>` runs the card's rows for
the uses the run makes (newton: second order; lm: forward AD) before anything is written; an op
the card fails for such a use, or one that cannot run, is one line, exit 2, and no run dir."""

import pytest

import fitting.config  # noqa: F401  (registers the schemas before train_cli keeps Hydra's state)

U, EX = "tests.opcheck.user_ops:", "docs.examples."


def refused(train_cli, tmp_path, *args):
    """The one line of a refused run; it left no run dir."""
    done = train_cli(*args, f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("config error: ") and done.stderr.count("\n") == 1, done.stderr
    assert not (tmp_path / "run").exists()
    return done.stderr


@pytest.mark.parametrize(("op", "says"), [
    ("exits", "calling it on x, as the mlp calls it: it called sys.exit(3)"),
    ("interrupts", "it raised KeyboardInterrupt"),
    ("loops", "calling it on x, as the mlp calls it: it did not return within 0.5 s (the limit "
              "for a first call, which may compile)"),
    ("allocates", "it ran out of memory"),
    ("returns_none", "it returns NoneType on x, as the mlp calls it; the slot's op (relu) "),
    ("returns_sum", "it returns tensor () float32 on x"),
    ("returns_float64", "it returns tensor (4, 8) float64 on x"),
    ("RaisesInBackward", "its backward on x, as the mlp calls it: ValueError: backward:"),
    ("AddOneNoDirty", "wrong for training: x, as the mlp calls it: it changes x in place"),
])
def test_an_op_the_card_refuses_or_that_cannot_run_is_refused(op, says, train_cli, tmp_path):
    limit = ["limit.call_s=0.5", "limit.first_call_s=0.5"] * (op == "loops")  # where it hangs
    line = refused(train_cli, tmp_path, "task=mlp", f"ops.activation={U}{op}", *limit)
    assert line.startswith(f"config error: ops.activation={U}{op}: ") and says in line, line
    assert line.endswith(f"(the card: python -m fitting.opcheck activation {U}{op})\n")


def test_newton_refuses_the_tutorials_sinhbad_and_gd_runs_it(train_cli, tmp_path):
    line = refused(train_cli, tmp_path, "optimizer=newton", f"ops.legendre_p3={EX}tutorial_ops:SinhBad")
    assert f"ops.legendre_p3={EX}tutorial_ops:SinhBad: wrong for second order: gradgradcheck " \
           "(float64): GradcheckError: Jacobian mismatch for output 0 with respect to x; " \
           "optimizer=newton needs it (the card: python -m fitting.opcheck legendre_p3 " \
           f"{EX}tutorial_ops:SinhBad)" in line
    done = train_cli(f"ops.legendre_p3={EX}tutorial_ops:SinhBad", "steps=2",
                     f"hydra.run.dir={tmp_path / 'gd'}")
    assert done.returncode == 0, done.stderr  # first order is right: gd needs no more


def test_lm_refuses_a_library_op_without_forward_ad(train_cli, tmp_path):
    op = "models.ops.exhibits.legendre_numpy:legendre_p3_numpy"
    line = refused(train_cli, tmp_path, "optimizer=lm", "dtype=float64", f"ops.legendre_p3={op}")
    assert "unsupported for forward AD: its jacobian by forward AD is all zeros" in line
    assert line.endswith(f"optimizer=lm needs it (the card: python -m fitting.opcheck "
                         f"legendre_p3 {op} --dtype float64)\n")


def test_an_op_returning_a_tuple_is_refused(train_cli, tmp_path):
    line = refused(train_cli, tmp_path, f"ops.legendre_p3={EX}tutorial_ops:Sinh")
    assert "it returns tuple (tensor (16,) float32, tensor (16,) float32, tensor (16,) " \
           "float32) on x, as poly3 calls it; the slot's op (legendre_p3_reference) returns " \
           "tensor (16,) float32" in line
