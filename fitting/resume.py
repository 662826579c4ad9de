"""Resuming a run dir: resume= composes the run's config from its overrides.yaml, as data: a
user's op named there runs only when the command line names it too (trust_remote_code)."""

import re
import shlex
from contextlib import suppress
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from fitting.config import CHECKPOINT, REPO_ROOT, ConfigError, short

KEPT = ("steps", "log", "ckpt", "threads", "on_nonfinite", "profile")  # a resume may change


def _parse(override: str) -> tuple[str, Any]:
    """(key, value) of an override as Hydra parses it (quotes, escapes); (it, None) if none."""
    try:
        parsed = OverridesParser.create().parse_override(override)
    except HydraException:
        return override, None
    return parsed.get_key_element().lstrip("+~"), parsed.value()


def _user_op(override: str) -> bool:
    """Whether an override names a user's op (anything but custom or builtin)."""
    key, value = _parse(override)
    return bool(re.fullmatch(r"([\w.]+\.)?ops\.\w+", key)) and value not in ("custom", "builtin")


def resume_command(run_dir: Path) -> str:
    """The command that continues the run in `run_dir`, quoted for Hydra and the shell, with
    the user's ops its overrides.yaml names (resume= runs them only when repeated)."""
    path = str(run_dir)
    arg = f"resume={path}" if re.fullmatch(r"[\w/.+-]+", path) else \
        '"resume=' + repr(path).replace('"', '\\"') + '"'
    ops: list[str] = []
    with suppress(ConfigError):
        ops = [shlex.quote(o) for o in map(str, _read(run_dir / ".hydra" / "overrides.yaml",
                                                      list)) if _user_op(o)]
    return " ".join(["python train.py", arg, *ops])


def resume_config(cfg: DictConfig, run_dir: Path, given: list[str]) -> DictConfig:
    """resume=DIR: conf/ composed with DIR's overrides.yaml (data: no _target_, no hydra.*, a
    user's op only if `given` repeats it) and the KEPT keys `given` sets."""
    where = Path(cfg.resume).expanduser().resolve()
    if not (where / CHECKPOINT).is_file() and not (where / ".hydra" / "config.yaml").is_file():
        jobs = sorted(p.parent.parent.name for p in where.glob("*/.hydra/config.yaml"))  # a sweep
        raise ConfigError(f"resume={cfg.resume}: {where} " + (
            "is a file; give the run dir that holds it" if where.is_file() else
            "holds no run" + (f"; its runs: {', '.join(jobs)}" * bool(jobs)) if where.is_dir()
            else "does not exist"))
    if where != run_dir:
        raise ConfigError(f"resume={cfg.resume} runs in that dir; leave hydra.run.dir out")
    stored = [str(o) for o in _read(where / ".hydra" / "overrides.yaml", list)]
    new = [o for o in given if not o.startswith("resume=")]
    ours, theirs = [_parse(o) for o in new], [_parse(o) for o in stored]
    for o, parsed in zip(new, ours, strict=True):
        if parsed[0].split(".")[0] not in KEPT and parsed not in theirs:
            raise ConfigError("resume= continues the run's own config; only steps, log.*, "
                              f"ckpt.*, threads, on_nonfinite and profile may change, got {o[:60]}")
    if any(_user_op(o) and parsed not in ours for o, parsed in zip(stored, theirs, strict=True)):
        raise ConfigError(f"{where} names ops of yours ({', '.join(filter(_user_op, stored))}): "
                          "resume= runs nothing a run dir names unless the command line repeats "
                          f"it; if you trust it: {resume_command(where)}")
    for o in stored:
        key, _, value = o.lstrip("+~").partition("=")
        if not _user_op(o) and (key.startswith("hydra") or "/" in value and "." not in key
                                or re.search(r"(^|\W)_\w+_(\W|$)", o)):
            raise ConfigError(f"{where}/.hydra/overrides.yaml sets {short(o, 60)}, which resume "
                              "does not take from a run dir (it could run code); not resumed")
    overrides = [*stored, *(o for o, parsed in zip(new, ours, strict=True) if parsed not in theirs)]
    try:
        if GlobalHydra.instance().is_initialized():  # inside train.py's Hydra app
            composed = compose("config", overrides=overrides)
        else:
            with initialize_config_dir(str(REPO_ROOT / "conf"), version_base="1.3"):
                composed = compose("config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(f"resume={cfg.resume}: its overrides no longer compose "
                          f"({short(err)})") from None
    composed.resume = str(where)  # set, not composed: Hydra's grammar would parse a path's = ,
    return composed


def _read(path: Path, kind: type) -> Any:
    """A YAML file of the run dir as plain data (yaml.safe_load: no tags, no objects)."""
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path} is missing (the run dir's config is needed); not resumed") \
            from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        why = getattr(err, "strerror", None) or f"not whole YAML: {short(err, 50)}"
        raise ConfigError(f"{path} cannot be read ({why}); not resumed") from None
    if not isinstance(data, kind) or kind is dict and not data:
        what = f"holds a {type(data).__name__}, not a {kind.__name__} (truncated?)"
        raise ConfigError(f"{path} {'is empty' if not data else what}; not resumed")
    return data
