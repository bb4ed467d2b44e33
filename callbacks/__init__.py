"""Lockstep callbacks: the `Callback` protocol and the built-in callbacks and loggers."""
from callbacks.accumulation_scheduler import GradientAccumulationScheduler
from callbacks.callback import Callback
from callbacks.csv_logger import CSVLogger
from callbacks.early_stopping import EarlyStopping
from callbacks.logger import Logger
from callbacks.lr_monitor import LearningRateMonitor
from callbacks.mlflow_logger import MLFlowLogger
from callbacks.model_checkpoint import ModelCheckpoint
from callbacks.model_summary import ModelSummary
from callbacks.progress_bar import ProgressBar
from callbacks.rich_progress_bar import RichProgressBar
from callbacks.tensorboard_logger import TensorBoardLogger
from callbacks.throughput_monitor import ThroughputMonitor
from callbacks.timer import Timer
from callbacks.wandb_logger import WandbLogger
from trainer.contracts import storage  # the storage layer, for loggers of your own (`from callbacks import storage`)

__all__ = [
    "Callback",
    "CSVLogger",
    "EarlyStopping",
    "GradientAccumulationScheduler",
    "LearningRateMonitor",
    "MLFlowLogger",
    "Logger",
    "ModelCheckpoint",
    "ModelSummary",
    "ProgressBar",
    "RichProgressBar",
    "TensorBoardLogger",
    "ThroughputMonitor",
    "Timer",
    "WandbLogger",
]
