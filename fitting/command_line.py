"""The command line's overrides composed once as Hydra will compose them, so that an unknown
key, a wrong type or an unknown option is one config-error line with exit 2, like the app's
own, instead of Hydra's multi-line report."""

from __future__ import annotations

import os
import re
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

import fitting.config  # noqa: F401  (registers the schemas the composition needs)

CONF = Path(__file__).resolve().parents[1] / "conf"
HELP = "python train.py --help lists the keys"
MAX_CHECKED = 20
# Hydra's flags that take the next argument as their value (not an override).
VALUE_FLAGS = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
               "--config-dir", "-cd", "--info", "-i", "--experimental-rerun"}


def overrides_problem(argv: list[str]) -> str | None:
    """What is wrong with the overrides in `argv` (train.py's arguments), in one line, or None.

    Each sweep (`a=1,2`, `-m`) is composed with its first value: the others have the same key
    and type. Flags (--help, --cfg, -m) are left to Hydra."""
    overrides = [arg for i, arg in enumerate(argv)
                 if not arg.startswith("-") and (i == 0 or argv[i - 1] not in VALUE_FLAGS)]
    if not overrides:
        return None
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
        problem = _run_dir_problem(parsed)
        if problem:
            return problem
        sweeps = [o.input_line for o in parsed if o.is_sweep_override()]
        if sweeps and not {"-m", "--multirun"} & set(argv):
            return (f"{sweeps[0]} is a sweep: add -m to run one job per value, or quote a "
                    f"value with a comma: key='a,b'")
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            for overrides in _one_job_each_value(parsed):
                compose("config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as err:
        return _one_line(err)
    return None


def _run_dir_problem(parsed: list) -> str | None:
    """An empty, file or unwritable hydra.run.dir / hydra.sweep.dir, which Hydra would report
    with a traceback (or, empty, take as the current dir)."""
    for o in parsed:
        key = o.get_key_element()
        if key not in ("hydra.run.dir", "hydra.sweep.dir") or o.is_sweep_override():
            continue
        value = str(o.value() or "")
        if not value.strip():
            return f"{key}= is empty; name a dir, or leave it out for outputs/<date>/<time>"
        path = Path(value).expanduser()
        if path.exists() and not path.is_dir():
            return f"{key}={value} is a file, not a dir; name another dir"
        existing = next(p for p in (path, *path.parents) if p.exists())
        if not os.access(existing, os.W_OK | os.X_OK):
            return f"{key}={value}: {existing} is not writable; name a dir you can write to"
    return None


def _one_job_each_value(parsed: list) -> list[list[str]]:
    """Jobs whose overrides take, between them, every value of each short sweep (up to
    MAX_CHECKED values; a longer one, e.g. seed=range(300), only its first): the other values
    of a sweep share its key and type."""
    values = [
        [o.input_line] if not o.is_sweep_override()
        else [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()][:MAX_CHECKED]
        for o in parsed
    ]
    jobs = max(len(v) for v in values)
    return [[v[min(i, len(v) - 1)] for v in values] for i in range(jobs)]


def _one_line(err: Exception) -> str:
    """Hydra's and OmegaConf's errors as one line naming the key and the fix."""
    text = "\n".join(str(e) for e in (err, err.__cause__) if e is not None)
    key = re.search(r"full_key: (\S+)", text)
    if "not in struct" in text or re.search(r"Key '.+' not in '", text):
        name = key.group(1) if key else re.search(r"Key '([^']+)'", text).group(1)
        return f"unknown key {name}; check its spelling ({HELP})"
    convert = re.search(r"Value '(.*)' of type '\w+' could not be converted to (\w+)", text)
    if convert and key:
        return (f"{key.group(1)}={convert.group(1)}: not a valid {convert.group(2).lower()} "
                f"({HELP} with their types)")
    missing = re.search(r"Could not find '([^/']+)/([^']+)'", text)
    if missing:
        group, option = missing.groups()
        listed = re.search(rf"Available options in '{group}':\n((?:\t.*\n?)*)", text)
        choices = ", ".join(listed.group(1).split()) if listed else "see --help"
        return f"{group}={option} is not an option of {group}; choose one of {choices}"
    return " ".join(line.strip() for line in text.splitlines() if line.strip())
