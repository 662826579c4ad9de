"""Runs that differ only in their op choices pair as "mine" against a reference run; the tables
say which is which, whether each run finished, and time it from the app's own clock."""

from __future__ import annotations

import pytest

from fitting.compare.cli import main
from tests.compare.app_runs import ops_config, write_app_job
from tests.compare.test_compare import table

LEAKY = {"_target_": "torch.nn.functional.leaky_relu", "_partial_": True, "negative_slope": 0.1}


def sweep_of_activations(root, *choices) -> list[str]:
    """A sweep `ops.activation=<choices...>`, job by job in the given order; the job names."""
    names = []
    for n, choice in enumerate(choices):
        text = choice if isinstance(choice, str) else "leaky"
        name = f"{n}_ops.activation={text}"
        write_app_job(root / name, ops_config(activation=choice), [f"ops.activation={text}"])
        names.append(name)
    return names


def pairs_of(root, capsys) -> list[tuple[str, str, str]]:
    assert main([str(root)]) == 0
    stdout = capsys.readouterr().out
    return [(p["mine"], p["reference"], p["runs (mine / reference)"]) for p in table(stdout, "Pairs")]


def test_custom_and_a_user_op_pair_against_the_first_job(tmp_path, capsys):
    """ops.activation=custom,my_ops:my_relu: neither is builtin nor torch's, so the first job
    is the reference."""
    custom, mine = sweep_of_activations(tmp_path, "custom", "my_ops:my_relu")
    assert pairs_of(tmp_path, capsys) == [
        ("custom, ops.activation=my_ops:my_relu", "custom", f"`{mine}` / `{custom}`")
    ]


def test_a_torch_function_is_the_reference_of_a_user_op(tmp_path, capsys):
    """ops.activation=my_ops:swish,torch.nn.functional:silu: torch's silu is the reference
    although swish ran first."""
    swish, silu = sweep_of_activations(tmp_path, "my_ops:swish", "torch.nn.functional:silu")
    assert pairs_of(tmp_path, capsys) == [
        (
            "custom, ops.activation=my_ops:swish",
            "custom, ops.activation=torch.nn.functional:silu",
            f"`{swish}` / `{silu}`",
        )
    ]


def test_builtin_wins_over_torch_functions_and_dicts_read_compactly(tmp_path, capsys):
    """A Hydra instantiate dict is shown as `leaky_relu(negative_slope=0.1)`; with a builtin
    run in the sweep, every other run pairs against it."""
    mine, leaky, builtin = sweep_of_activations(tmp_path, "my_ops:swish", LEAKY, "builtin")
    assert pairs_of(tmp_path, capsys) == [
        ("custom, ops.activation=my_ops:swish", "custom, ops.activation=builtin",
         f"`{mine}` / `{builtin}`"),
        ("custom, ops.activation=leaky_relu(negative_slope=0.1)", "custom, ops.activation=builtin",
         f"`{leaky}` / `{builtin}`"),
    ]  # fmt: skip


def test_job_order_is_numeric_not_alphabetical(tmp_path, capsys):
    """Job 2 comes before job 10: with no builtin or torch op, job 2 is the reference."""
    for n, choice in ((10, "my_ops:b"), (2, "my_ops:a")):
        name = f"{n}_ops.activation={choice}"
        write_app_job(tmp_path / name, ops_config(activation=choice), [f"ops.activation={choice}"])
    ((mine, reference, _),) = pairs_of(tmp_path, capsys)
    assert (mine, reference) == ("custom, ops.activation=my_ops:b", "custom, ops.activation=my_ops:a")


def test_status_says_which_runs_finished(tmp_path, capsys):
    write_app_job(tmp_path / "0_impl=custom", ops_config("custom"), ["impl=custom"])
    write_app_job(tmp_path / "1_impl=builtin", ops_config("builtin"), ["impl=builtin"],
                  finished=False)  # fmt: skip
    assert main([str(tmp_path)]) == 0
    rows = {r["run"].strip("`"): r["status"] for r in table(capsys.readouterr().out, "Runs")}
    assert rows == {"0_impl=custom": "finished", "1_impl=builtin": "running or stopped"}


def test_a_pause_between_stop_and_resume_does_not_count(tmp_path, capsys):
    """10 steps of 2 ms with a 90 s pause in the events' wall times: 500 steps/s, 0.02 s."""
    write_app_job(tmp_path / "run", ops_config(), [], step_ms=2.0, pause_s=90.0)
    assert main([str(tmp_path)]) == 0
    (row,) = table(capsys.readouterr().out, "Runs")
    assert float(row["steps/s"]) == pytest.approx(500.0, rel=1e-3)
    assert float(row["wall time (s)"]) == pytest.approx(0.02, abs=1e-3)
