"""The optimizers the app offers, by name: `OPTIMIZERS["lbfgs"]` is everything about
optimizer=lbfgs (fitting.optim.option.OptimizerOption). Newton and Levenberg–Marquardt
themselves are in fitting.optim.newton and fitting.optim.levenberg_marquardt."""

from fitting.optim.option import OptimizerOption
from fitting.optim.options.adam import OPTION as ADAM
from fitting.optim.options.gd import OPTION as GD
from fitting.optim.options.lbfgs import OPTION as LBFGS
from fitting.optim.options.lm import OPTION as LM
from fitting.optim.options.newton import OPTION as NEWTON
from fitting.optim.options.sgd import OPTION as SGD

OPTIMIZERS: dict[str, OptimizerOption] = {
    option.name: option for option in (GD, SGD, ADAM, LBFGS, NEWTON, LM)
}
