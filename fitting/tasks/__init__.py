"""The fitting tasks, each built by Hydra from conf/task/<name>.yaml: its data, model and figure."""

from fitting.tasks.cnn import CNNTask
from fitting.tasks.forecast import ForecastTask
from fitting.tasks.mlp import MLPTask
from fitting.tasks.poly3 import Poly3Task
