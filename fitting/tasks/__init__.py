"""The tasks (conf/task/<name>.yaml) and TASKS, their registry: name -> class, smallest first."""

from fitting.tasks.cnn import CNNTask
from fitting.tasks.forecast import ForecastTask
from fitting.tasks.mlp import MLPTask
from fitting.tasks.poly3 import Poly3Task

TASKS = {task.name: task for task in (Poly3Task, MLPTask, CNNTask, ForecastTask)}
