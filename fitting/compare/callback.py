"""The Hydra callback that ends every sweep (hydra.callbacks in conf/config.yaml)."""

import json
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from hydra.types import RunMode
from tqdm import tqdm

from fitting.track.tensorboard import METRICS, hparam_values  # the HParams columns

SHORT = ("loss", "step ms", "saved B")


class SweepSummary(Callback):
    """A line per job's start and end; once all jobs have returned, the sweep's table,
    difference runs and TensorBoard line."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        """Tell train.py's signal line where this sweep is, its jobs how many there are and
        when it began (environment variables: a joblib or SLURM job inherits them)."""
        os.environ["FITTING_SWEEP_DIR"] = os.path.abspath(str(config.hydra.sweep.dir))
        os.environ["FITTING_SWEEP_JOBS"] = f"{count_jobs(config)} {time.time()}"

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        """In a sweep: `job k of n: <overrides>; run dir: <dir>` and, on the console, only
        warnings from the job itself (its log file keeps every line)."""
        if config.hydra.mode != RunMode.MULTIRUN:
            return
        for handler in logging.getLogger().handlers:  # Hydra's job logging, set up per job
            if not isinstance(handler, logging.FileHandler):
                handler.setLevel(logging.WARNING)
        print(f"{_job(config)}: {' '.join(config.hydra.overrides.task)}; run dir: "
              f"{config.hydra.runtime.output_dir}", flush=True)

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        """In a sweep: `job k of n ended: <status>, final loss L; <time> left in the sweep`."""
        if config.hydra.mode != RunMode.MULTIRUN:
            return
        path = os.path.join(config.hydra.runtime.output_dir, "results.json")  # written whole
        result = json.loads(Path(path).read_bytes()) if os.path.isfile(path) else None
        said = (f"{result['status']}, final loss {result['final_loss']:.6g}"
                if result and "final_loss" in result else (result or {}).get("status", "failed"))
        n, start = map(float, os.environ.get("FITTING_SWEEP_JOBS", "0 0").split())
        k = config.hydra.job.num + 1
        left = f"; {tqdm.format_interval((time.time() - start) * (n - k) / k)} left in the sweep"
        print(f"{_job(config)} ended: {said}{left if start and n > k else ''}", flush=True)

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        """Write the HParams columns and fitting.compare's files, print its report (write_report's
        text); exit 1 if a job did not complete."""
        from fitting.compare import runs as r
        from fitting.compare.report import write_report

        logging.getLogger("tensorboard").setLevel(logging.WARNING)  # not a line per file read
        sweep_dir = os.path.abspath(str(config.hydra.sweep.dir))
        runs = r.read_runs(sweep_dir)
        write_experiment(runs)
        text = write_report(runs, sweep_dir, sweep_dir) if runs else ""
        print(text or f"tensorboard --logdir {r.shown(sweep_dir)}\n", end="", flush=True)
        if any(run.status not in r.DONE for run in runs):
            sys.exit(1)  # Hydra's callbacks catch an Exception, not this


def count_jobs(config: Any) -> int:
    """How many jobs the sweep runs: the product of its sweep overrides' lengths (the command
    line's over its sweeper's params, as Hydra's basic sweeper takes them)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    parsed = OverridesParser.create().parse_overrides([*params, *config.hydra.overrides.task])
    last = {o.key_or_group: o for o in parsed}
    return math.prod(len(list(o.sweep_string_iterator())) for o in last.values()
                     if o.is_sweep_override())


def _job(config: Any) -> str:
    """`job k of n` (n from the sweep's start, where known)."""
    n = os.environ.get("FITTING_SWEEP_JOBS", "?").split()[0]
    return f"job {config.hydra.job.num + 1} of {n}"


def write_experiment(runs: list) -> None:
    """The sweep's HParams columns, into its first job's run: what varies across its runs, each
    with its values as its domain (parallel coordinates draws only such columns); METRICS."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
    from tensorboard.plugins.hparams.summary_v2 import Discrete, Metric
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    seen: dict[str, set] = {}
    for run in (run for run in runs if run.config and "ops" in run.result):  # those with a row
        for name, value in hparam_values(run.result, run.config, run.overrides).items():
            seen.setdefault(name, set()).add(value)
    # What varies only (else the op slots): a 1366 px window shows about 5 columns of the table.
    # HParamInfo.differs, which the hparams api cannot set: TensorBoard shows those first.
    varies = {n for n, v in seen.items() if len(v) > 1} or {n for n in seen if n[:4] == "ops."}
    infos = [api_pb2.HParamInfo(name=n, display_name=n.removeprefix("ops."), differs=len(v) > 1)
             for n, v in sorted(seen.items()) if n in varies]
    for info in infos:
        Discrete(seen[info.name]).update_hparam_info(info)
    metrics = [Metric(tag, display_name=short).as_proto()
               for tag, short in zip(METRICS, SHORT, strict=True)]
    data = plugin_data_pb2.HParamsPluginData(
        experiment=api_pb2.Experiment(hparam_infos=infos, metric_infos=metrics))
    value = Summary.Value(tag=metadata.EXPERIMENT_TAG, tensor=metadata.NULL_TENSOR,
                          metadata=metadata.create_summary_metadata(data))
    if runs:  # in the first job's run: one in the sweep dir shows as an empty run named "."
        writer = EventFileWriter(runs[0].path)
        writer.add_event(Event(wall_time=time.time(), summary=Summary(value=[value])))
        writer.close()
