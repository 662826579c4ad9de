"""Resuming a run dir: resume= composes the run's config from its overrides.yaml, as data: a
user's op named there runs only when the command line names it too (trust_remote_code)."""

import os
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
from fitting.track.files import NotAFile, read_file

KEPT = ("steps", "log", "ckpt", "threads", "on_nonfinite", "profile")  # a resume may change
MAX_YAML = 1 << 20  # bytes of a run dir's YAML file read back (the app writes a few kB)


def _parse(override: str) -> tuple[str, Any]:
    """(key, value) of an override as Hydra parses it (quotes, escapes); (it, ...) if none."""
    try:
        parsed = OverridesParser.create().parse_override(override)
    except HydraException:
        return override, ...
    return parsed.get_key_element().lstrip("+~"), parsed.value()


def _names_code(key: str, value: Any) -> bool:
    """Whether a parsed override could name code (resume= takes it only if the command line
    repeats it): an op other than custom or builtin in any form (ops.<slot>=, ops={...}, +, ++,
    nested), a _x_ key, an interpolation, a group choice not a plain name, an unparsable one."""
    if isinstance(value, dict | list):
        return any(_names_code(f"{key}.{k}", v) for k, v in
                   (value.items() if isinstance(value, dict) else enumerate(value)))
    if re.search(r"(^|\.)_\w+_($|\.)", key) or not isinstance(value, str | int | float | None):
        return True
    if re.fullmatch(r"([\w.]+\.)?ops\.\w+", key):
        return value not in ("custom", "builtin")
    return isinstance(value, str) and ("${" in value or "." not in key
                                       and not re.fullmatch(r"[\w-]*", value))


def resume_command(run_dir: Path) -> str:
    """The command that continues the run in `run_dir`, quoted for Hydra and the shell, with
    the user's ops its overrides.yaml names (resume= runs them only when repeated)."""
    path = str(run_dir)  # Hydra's double quotes (its = and , would be parsed), then the shell's
    value = path if re.fullmatch(r"[\w/.+-]+", path) else \
        '"' + re.sub(r'(\\*)("|$)', lambda m: m[1] * 2 + '\\"' * bool(m[2]), path) + '"'
    arg = shlex.quote(f"resume={value}")
    ops: list[str] = []
    with suppress(ConfigError, OSError):
        ops = [shlex.quote(o) for o in map(str, _read(run_dir / ".hydra" / "overrides.yaml",
                                                      list)) if _names_code(*_parse(o))]
    return " ".join(["python train.py", arg, *ops])


def resume_config(cfg: DictConfig, run_dir: Path, given: list[str]) -> DictConfig:
    """resume=DIR: conf/ composed with DIR's overrides.yaml (data: no _target_, no hydra.*, a
    user's op only if `given` repeats it) and the KEPT keys `given` sets."""
    where = Path(cfg.resume).expanduser().resolve()
    if not all(os.access(d, os.X_OK) for d in (where.parent, where) if os.path.isdir(d)):
        raise ConfigError(f"resume={cfg.resume}: {where} cannot be entered (permission denied: "
                          "another user's dir?)")
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
    for o in stored:
        if o.lstrip("+~").startswith("hydra"):
            raise ConfigError(f"{where}/.hydra/overrides.yaml sets {short(o, 60)}, which resume "
                              "does not take from a run dir (it could run code); not resumed")
    if code := [o for o, parsed in zip(stored, theirs, strict=True)
                if _names_code(*parsed) and parsed not in ours]:
        raise ConfigError(f"{where} names ops or code of yours ({', '.join(code)}): resume= runs "
                          "nothing a run dir names unless the command line repeats it; if you "
                          f"trust it: {resume_command(where)}")
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


class _NoAliases(yaml.SafeLoader):
    """yaml.safe_load's loader, refusing aliases: the app writes none (an alias bomb stops)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("an alias (*name), which the app never writes")
        return super().compose_node(parent, index)


def _read(path: Path, kind: type) -> Any:
    """A YAML file of the run dir as plain data: no link followed, at most MAX_YAML bytes, no
    tags, objects or aliases."""
    try:
        text = read_file(path, MAX_YAML)
        if len(text) > MAX_YAML:
            raise ConfigError(f"{path} is over {MAX_YAML} bytes (the app writes a few kB); "
                              "not resumed")
        data = yaml.load(text.decode(), Loader=_NoAliases)  # noqa: S506  safe_load's, less aliases
    except FileNotFoundError:
        raise ConfigError(f"{path} is missing (the run dir's config is needed); not resumed") \
            from None
    except NotAFile:
        raise
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        why = getattr(err, "strerror", None) or f"not whole YAML: {short(err, 50)}"
        raise ConfigError(f"{path} cannot be read ({why}); not resumed") from None
    if not isinstance(data, kind) or kind is dict and not data:
        what = f"holds a {type(data).__name__}, not a {kind.__name__} (truncated?)"
        raise ConfigError(f"{path} {'is empty' if not data else what}; not resumed")
    return data
