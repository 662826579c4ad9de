"""The fitting tasks, each built by Hydra from conf/task/<name>.yaml: its data, model and figure.
TASKS, the task registry: each task's name (task=<name>) -> its class, smallest first."""

from fitting.tasks.cnn import CNNTask
from fitting.tasks.mlp import MLPTask
from fitting.tasks.poly3 import Poly3Task

TASKS = {task.name: task for task in (Poly3Task, MLPTask, CNNTask)}
