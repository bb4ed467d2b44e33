"""Lockstep: a PyTorch trainer whose DDP + accumulation equals one big batch, at no cost."""
from trainer.strategies.allreduce import AllReduceStrategy
from trainer.loops.anomaly import NonFiniteGradientError, NonFiniteLossError
from trainer.checkpointing.checkpoint import CheckpointError
from trainer.strategies.ddp import DDPStrategy
from trainer.strategies.fsdp import FSDPStrategy
from trainer.launch.failure_notes import RankFailedError
from trainer.data.datamodule import DataModule
from trainer.module import TrainModule
from trainer.launch.preemption import PREEMPTION_EXIT_CODE, Preempted
from trainer.distributed.rank_zero import rank_zero_info, rank_zero_only, rank_zero_warn
from trainer.seed import seed_everything
from trainer.strategies.strategy import SingleDeviceStrategy, Strategy
from trainer.trainer import Trainer
from trainer.launch.worker_process import adopt_launcher_from_env

# Lightning's names, so a Lightning project ports by changing its imports
LightningModule = TrainModule
LightningDataModule = DataModule

adopt_launcher_from_env()  # in a worker of `Trainer(devices=N)`: die with the launcher, whole lines

__version__ = "0.1.0"

__all__ = [
    "Trainer",
    "TrainModule",
    "DataModule",
    "LightningModule",
    "LightningDataModule",
    "seed_everything",
    "Strategy",
    "SingleDeviceStrategy",
    "DDPStrategy",
    "AllReduceStrategy",
    "FSDPStrategy",
    "rank_zero_only",
    "rank_zero_info",
    "rank_zero_warn",
    "CheckpointError",
    "NonFiniteLossError",
    "NonFiniteGradientError",
    "RankFailedError",
    "Preempted",
    "PREEMPTION_EXIT_CODE",
]
