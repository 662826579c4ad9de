"""Any op in its slot, end to end through `python train.py`: torch's own activations, a user's
Swish, ops with arguments in Hydra's form, a sweep of reference vs mine that compare pairs, the
pre-check of what the optimizer needs, and hostile ops that exit or diverge."""

import json
from pathlib import Path

import pytest

import fitting.config  # noqa: F401  (registers the schemas once, before train_cli saves Hydra's state)
from fitting.compare.cli import report

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
MLP = ("task=mlp", "task.hidden=[8]", "task.n_points=32", "task.n_val=16", "log.figure_every=0")
LEAKY = "ops.activation={_target_:torch.nn.functional.leaky_relu,_partial_:true,negative_slope:0.1}"


@pytest.fixture
def examples_on_path(monkeypatch):
    """docs/examples importable, as PYTHONPATH=docs/examples makes it."""
    monkeypatch.syspath_prepend(str(EXAMPLES))


@pytest.mark.parametrize("task", ["mlp", "cnn"])
def test_torch_and_user_activations_train_in_the_activation_slot(
    tmp_path, train_cli, examples_on_path, task
):
    sizes = MLP if task == "mlp" else ("task=cnn", "task.n_train=64", "task.n_val=16",
                                        "task.batch_size=16", "log.figure_every=0")
    losses = {}
    for spec in ("torch.nn.functional:silu", "swish:Swish"):
        out = tmp_path / spec.replace(":", "_")
        done = train_cli(*sizes, "steps=5", f"ops.activation={spec}", f"hydra.run.dir={out}")
        assert done.returncode == 0, done.stderr
        assert f"ops.activation={spec}" in done.stdout
        losses[spec] = json.loads((out / "results.json").read_text())["loss"]
    # The user's Swish is torch's silu: the same training, up to rounding.
    assert losses["swish:Swish"] == pytest.approx(losses["torch.nn.functional:silu"], rel=1e-5)


def test_a_sweep_dir_names_an_op_with_its_arguments(tmp_path, train_cli):
    sweep = tmp_path / "sweep"
    done = train_cli("-m", *MLP, "steps=2", f"ops.activation=custom,{LEAKY.split('=', 1)[1]}",
                     f"hydra.sweep.dir={sweep}")
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in sweep.iterdir() if (p / ".hydra").is_dir())
    assert "ops.activation={_target_:torch.nn.functional.leaky_relu,_partial_:True," \
        "negative_slope:0.1}" in names[1]


def test_an_op_with_arguments_in_hydras_form_trains_and_is_named(tmp_path, train_cli):
    out = tmp_path / "run"
    done = train_cli(*MLP, "steps=3", LEAKY, f"hydra.run.dir={out}")
    assert done.returncode == 0, done.stderr
    name = "ops.activation=torch.nn.functional.leaky_relu(negative_slope=0.1)"
    assert name in done.stdout  # the start line names the function and its arguments
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    acc = EventAccumulator(str(out)).Reload()
    start = plugin_data_pb2.HParamsPluginData.FromString(
        acc.PluginTagToContent("hparams")["_hparams_/session_start_info"]).session_start_info
    assert start.hparams["ops.activation"].string_value == name.split("=", 1)[1]


def test_a_sweep_of_reference_vs_mine_is_paired_and_differenced(
    tmp_path, train_cli, examples_on_path
):
    sweep = tmp_path / "sweep"
    done = train_cli("-m", *MLP, "steps=4", "ops.activation=torch.nn.functional:silu,swish:Swish",
                     f"hydra.sweep.dir={sweep}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(f"all jobs of the sweep: tensorboard --logdir {sweep}") == 1
    jobs = sorted(p.name for p in sweep.iterdir() if (p / ".hydra").is_dir())
    assert any("ops.activation=swish:Swish" in job for job in jobs)
    differences = list((sweep / "differences").iterdir())
    assert len(differences) == 1 and "swish" in differences[0].name
    tables = report(sweep, tmp_path / "report")
    assert "No pairs" not in tables and "swish:Swish" in tables


def test_the_pre_check_refuses_what_the_optimizer_needs_before_writing(
    tmp_path, train_cli, examples_on_path
):
    out = tmp_path / "run"
    done = train_cli("optimizer=lm", "ops.legendre_p3=tutorial_ops:LegendrePolynomial3",
                     f"hydra.run.dir={out}")
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "config error: ops.legendre_p3=tutorial_ops:LegendrePolynomial3: optimizer=lm needs "
        "forward-mode AD"), done.stderr
    assert not (out / "checkpoint.pt").exists()


def test_an_op_that_exits_mid_run_never_reads_as_success(tmp_path, train_cli, monkeypatch):
    (tmp_path / "exits.py").write_text(
        "import sys, torch\ncalls = [0]\n"
        "def relu_then_exit(x):\n"
        "    calls[0] += 1\n"
        "    if calls[0] > 30:\n"
        "        sys.exit(0)\n"
        "    return torch.relu(x)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    done = train_cli(*MLP, "steps=50", "ops.activation=exits:relu_then_exit",
                     f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode != 0
    assert done.stderr.splitlines()[-1].startswith(
        "a user op called sys.exit(0) during the run; the run's ops: ")
    assert "ops.activation=exits:relu_then_exit" in done.stderr
