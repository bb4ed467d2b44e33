"""Large-batch optimizers (LARS/LARC, LAMB, NovoGrad) and learning-rate warmup.

Importing this package loads only torch: it must stay usable without the Trainer's heavier
dependencies (tensorboard, torchvision, tqdm). See ``docs/large-batch.md``.
"""
from trainer.optim.lamb import LAMB
from trainer.optim.lars import LARS
from trainer.optim.novograd import NovoGrad
from trainer.optim.param_groups import ExcludeSpec, ParamsT, exclude_1d, named_param_groups
from trainer.optim.warmup import LinearWarmup, scale_scheduler_base_lrs, warmup

__all__ = [
    "LARS",
    "LAMB",
    "NovoGrad",
    "ExcludeSpec",
    "ParamsT",
    "exclude_1d",
    "named_param_groups",
    "LinearWarmup",
    "scale_scheduler_base_lrs",
    "warmup",
]
