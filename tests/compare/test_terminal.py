"""What a sweep's end prints fits a 100-column terminal, no number split across lines; the long
names and each difference stay in compare.md. Two versions of a user's op are two ops."""

from __future__ import annotations

import pytest

from fitting.compare import report
from fitting.compare.runs import pair, read_runs
from fitting.tasks import TASKS
from tests.compare.sweeps import LOSSES, write_run

LEAKY = {"_target_": "torch.nn.functional.leaky_relu", "_partial_": True, "negative_slope": 0.1}
OVERRIDE = {"builtin": "builtin", "leaky": "{_target_:torch.nn.functional.leaky_relu,_partial_:True,"
            "negative_slope:0.1}"}  # as Hydra names a job's dir
LONG = "my_long_module_of_ops:swish_with_a_learnable_beta_parameter"


@pytest.fixture(scope="module")
def cnn_sweep(tmp_path_factory):
    """`-m task=cnn ops.conv_bn=custom,builtin ops.activation=builtin,LEAKY,LONG seed=0,1`."""
    root, job = tmp_path_factory.mktemp("cnn"), 0
    for conv_bn in ("custom", "builtin"):
        for activation in ("builtin", "leaky", LONG):
            for seed in (0, 1):
                name = (f"{job}_ops.activation={OVERRIDE.get(activation, activation)},"
                        f"ops.conv_bn={conv_bn},seed={seed},steps=300,task=cnn")
                write_run(root / name, task="cnn", seed=seed, conv_bn=conv_bn,
                          activation=LEAKY if activation == "leaky" else activation,
                          losses=LOSSES * (1 + job / 1000),
                          step_ms=11.93 + job, saved_bytes=6_051_904 + 3_162_112 * job,
                          status="running or killed" if job == 11 else "completed")
                job += 1
    return root


def test_the_sweeps_table_fits_100_columns_and_keeps_every_number_whole(cnn_sweep):
    stdout = report.report(str(cnn_sweep))
    lines = stdout.splitlines()
    assert max(map(len, lines)) <= 100
    runs = read_runs(cnn_sweep)
    pair(runs)
    for job, run in enumerate(runs):
        (row,) = [line for line in lines if line.startswith(f"#{job} seed={job % 2} ")]
        numbers = [f"{run.number('final_loss', ''):.6g}", f"{11.93 + job:.4g}",
                   f"{6_051_904 + 3_162_112 * job:,}", run.status]
        assert all(f" {n}" in row for n in numbers), (row, numbers)
    md = (cnn_sweep / "compare.md").read_text()  # the full names, each difference
    assert (f"| `10_ops.activation={LONG},ops.conv_bn=builtin,seed=0,steps=300,task=cnn` | "
            f"conv_bn=builtin, activation={LONG} |") in md
    assert ("- 2_ops.activation={_target_:torch.nn.functional.leaky_relu,_partial_:True,"
            "negative_slope:0.1},ops.conv_bn=custom,seed=0,steps=300,task=cnn − 6_ops.activation="
            "builtin,ops.conv_bn=builtin,seed=0,steps=300,task=cnn: max |Δ| ") in md


def test_two_versions_of_a_users_op_are_two_ops(tmp_path):
    for seed in (0, 1):
        write_run(tmp_path / f"{3 * seed}_v1", seed=seed, activation="my_ops:swish",
                  sources={"activation": "def swish(x): return x * sigmoid(x)\n"})
        write_run(tmp_path / f"{3 * seed + 1}_v2", seed=seed, activation="my_ops:swish",
                  losses=LOSSES * 1.01, sources={"activation": "def swish(x): return x\n"})
        write_run(tmp_path / f"{3 * seed + 2}_ref", seed=seed, activation="builtin")
    runs = read_runs(tmp_path)
    v1, v2 = runs[0].ops["activation"], runs[1].ops["activation"]
    assert v1.startswith("my_ops:swish @") and v2.startswith("my_ops:swish @") and v1 != v2
    stdout = report.report(str(tmp_path))
    assert f"\n#0 seed=0  {v1}  " in stdout and f"\n#1 seed=0  {v2}  " in stdout
    md = (tmp_path / "compare.md").read_text()
    assert f"- activation={v1} [#0 #3] vs builtin [#2 #5]: identical" in md
    assert f"- activation={v2} [#1 #4] vs builtin [#2 #5]: " in md


def test_a_sweep_over_impl_shows_one_impl_column(tmp_path):
    job = 0  # `-m task=poly3,mlp,cnn impl=custom,builtin`: every slot follows impl=
    for task in TASKS:
        for impl in ("custom", "builtin"):
            write_run(tmp_path / f"{job}_impl={impl},task={task}", task=task, impl=impl,
                      losses=LOSSES * (1 + job))
            job += 1
    lines = report.report(str(tmp_path)).splitlines()
    assert lines[0].split()[:2] == ["job", "impl"] and max(map(len, lines)) <= 100
    for job, impl in enumerate(["custom", "builtin"] * 3):
        assert any(line.startswith(f"#{job} ") and f" {impl} " in line for line in lines), lines
