"""The optimizers torch does not have: the tutorial's GD, damped Newton, Levenberg–Marquardt."""

from fitting.optim.gd import GD
from fitting.optim.lm import LM
from fitting.optim.newton import Newton
