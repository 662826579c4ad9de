"""The Hydra callback that ends every sweep (hydra.callbacks in conf/config.yaml)."""

import logging
import os
import sys
import time
from typing import Any

from hydra.experimental.callback import Callback

from fitting.track.tensorboard import METRICS  # the HParams metric columns

SHORT = ("loss", "val loss", "step ms (median)", "saved B")  # every column fits in 1600 px


class SweepSummary(Callback):
    """Once all jobs have returned: the sweep's table, difference runs and TensorBoard line."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        """Tell train.py's signal line where this sweep is (the sweep's own process only)."""
        os.environ["FITTING_SWEEP_DIR"] = os.path.abspath(str(config.hydra.sweep.dir))

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        """Print the table, the verdicts and the TensorBoard line; name the jobs that did not
        complete (then exit 1); write compare.md, compare.png and the difference runs."""
        from fitting.compare import runs as r
        from fitting.compare.report import write_report

        logging.getLogger("tensorboard").setLevel(logging.WARNING)  # not a line per file read
        sweep_dir = os.path.abspath(str(config.hydra.sweep.dir))
        runs = r.read_runs(sweep_dir)
        if runs:
            print(write_report(runs, sweep_dir, sweep_dir), end="")
        undone = [run for run in runs if run.status not in r.DONE]
        for run in undone:  # a failed job: its exit status and its one line (train.py's)
            why = (f" (exit {run.result['exit']}): {run.result.get('reason')}"
                   if "exit" in run.result else "")
            print(f"did not complete: {r.job(run)} {run.status}{why}")
        write_experiment(runs, r.differing(runs))
        print(f"tensorboard --logdir {r.shown(sweep_dir)}", flush=True)
        if undone:
            sys.exit(1)  # Hydra's callbacks catch an Exception, not this


def write_experiment(runs: list, differing: list[str]) -> None:
    """The sweep's HParams columns (the differing op slots first), in the first job's run."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    # SummaryWriter cannot set HParamInfo.differs: TensorBoard shows the columns marked so
    # first, and nothing else tells a reader which op a sweep varies. The columns are those
    # fitting.track logs: `ops.<slot>` and `run`; every slot of the configs, not only this
    # sweep's task's: of a logdir of sweeps TensorBoard shows one experiment, any sweep's.
    differs = {f"ops.{slot}" for slot in differing}
    names = {f"ops.{s}" for run in runs for s in [*run.config.get("ops", ()), *run.ops]} | {"run"}
    infos = [api_pb2.HParamInfo(name=n, type=api_pb2.DATA_TYPE_STRING, differs=n in differs)
             for n in sorted(names, key=lambda n: (n not in differs, n[:4] != "ops.", n))]
    metrics = [api_pb2.MetricInfo(name=api_pb2.MetricName(tag=tag), display_name=short)
               for tag, short in zip(METRICS, SHORT, strict=True)]
    data = plugin_data_pb2.HParamsPluginData(
        experiment=api_pb2.Experiment(hparam_infos=infos, metric_infos=metrics))
    value = Summary.Value(tag=metadata.EXPERIMENT_TAG, tensor=metadata.NULL_TENSOR,
                          metadata=metadata.create_summary_metadata(data))
    if runs:  # in the first job's run: one in the sweep dir shows as an empty run named "."
        writer = EventFileWriter(runs[0].path)
        writer.add_event(Event(wall_time=time.time(), summary=Summary(value=[value])))
        writer.close()
