"""Lockstep: a PyTorch trainer whose DDP + accumulation equals one big batch, at no cost."""
from trainer.allreduce import AllReduceStrategy
from trainer.ddp import DDPStrategy
from trainer.module import TrainModule
from trainer.rank_zero import rank_zero_info, rank_zero_only, rank_zero_warn
from trainer.seed import seed_everything
from trainer.strategy import SingleDeviceStrategy, Strategy
from trainer.trainer import Trainer

__version__ = "0.1.0"

__all__ = [
    "Trainer",
    "TrainModule",
    "seed_everything",
    "Strategy",
    "SingleDeviceStrategy",
    "DDPStrategy",
    "AllReduceStrategy",
    "rank_zero_only",
    "rank_zero_info",
    "rank_zero_warn",
]
