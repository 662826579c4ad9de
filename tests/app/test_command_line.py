"""Hydra's own composition errors (an unknown key, a wrong type, an unknown option, a sweep
without -m) end like the app's: one `config error:` line naming the key and the fix, exit 2."""

import pytest

import fitting.config  # noqa: F401  (registers the schemas once, before train_cli saves Hydra's state)

CASES = [
    (("stepz=5",), "unknown key stepz; check its spelling (python train.py --help lists the keys)"),
    (("optimizer.lrr=1",), "unknown key optimizer.lrr; check its spelling"),
    (("steps=abc",), "steps=abc: not a valid integer"),
    (("task=foo",), "task=foo is not an option of task; choose one of cnn, mlp, poly3"),
    (("ops.activation=custom,mod:fn",), "ops.activation=custom,mod:fn is a sweep: add -m"),
    (("-m", "task=mlp", "steps=1,abc"), "steps=abc: not a valid integer"),
]


@pytest.mark.parametrize(("args", "message"), CASES)
def test_a_bad_override_is_one_line_and_exit_2(tmp_path, train_cli, args, message):
    done = train_cli(*args, f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"config error: {message}"), done.stderr
    assert not (tmp_path / "run").exists()


def test_flags_and_their_values_are_left_to_hydra(train_cli):
    done = train_cli("--cfg", "job", "task=mlp")
    assert done.returncode == 0
    assert "name: mlp" in done.stdout


def test_a_run_dir_that_is_empty_a_file_or_read_only_is_one_line(tmp_path, train_cli):
    a_file = tmp_path / "file"
    a_file.write_text("not a dir")
    assert train_cli("hydra.run.dir=").stderr == (
        "config error: hydra.run.dir= is empty; name a dir, or leave it out for "
        "outputs/<date>/<time>\n")
    done = train_cli(f"hydra.run.dir={a_file}")
    assert done.returncode == 2
    assert done.stderr == f"config error: hydra.run.dir={a_file} is a file, not a dir; name " \
        "another dir\n"
