"""The optimizers the app offers, by name: `OPTIMIZERS["lbfgs"]` is everything about
optimizer=lbfgs (fitting.optim.spec.OptimizerSpec). Newton and Levenberg–Marquardt themselves
are in fitting.optim.newton and fitting.optim.levenberg_marquardt."""

from fitting.optim.spec import OptimizerSpec
from fitting.optim.specs.adam import SPEC as ADAM
from fitting.optim.specs.gd import SPEC as GD
from fitting.optim.specs.lbfgs import SPEC as LBFGS
from fitting.optim.specs.lm import SPEC as LM
from fitting.optim.specs.newton import SPEC as NEWTON
from fitting.optim.specs.sgd import SPEC as SGD

OPTIMIZERS: dict[str, OptimizerSpec] = {
    spec.name: spec for spec in (GD, SGD, ADAM, LBFGS, NEWTON, LM)
}
