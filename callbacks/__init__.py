"""Lockstep callbacks: the `Callback` protocol and the built-in callbacks and loggers."""
import sys

try:
    import trainer.contracts  # noqa: F401 - the floor every callback imports
except ModuleNotFoundError as err:  # `trainer` is not Lockstep's package: a file of the user's hides it
    if getattr(sys.modules.get("trainer"), "__path__", None) is not None:
        raise
    import importlib.util
    import os

    # the message is the floor's (stdlib only), read from its file: `import trainer...` is what fails
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "trainer", "contracts", "shadowing.py")
    spec = importlib.util.spec_from_file_location("_lockstep_shadowing", path)
    if spec is None or spec.loader is None:  # no floor in this checkout: the import's own error
        raise
    shadowing = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shadowing)
    raise ImportError(shadowing.shadowing_message("trainer", getattr(sys.modules.get("trainer"), "__file__", None))) from err

from callbacks.accumulation_scheduler import GradientAccumulationScheduler
from callbacks.backbone_finetuning import BackboneFinetuning
from callbacks.base_finetuning import BaseFinetuning
from callbacks.batch_size_finder import BatchSizeFinder
from callbacks.callback import Callback
from callbacks.checkpoint import Checkpoint
from callbacks.csv_logger import CSVLogger
from callbacks.early_stopping import EarlyStopping
from callbacks.lambda_callback import LambdaCallback
from callbacks.logger import Logger
from callbacks.lr_finder import LearningRateFinder
from callbacks.lr_monitor import LearningRateMonitor
from callbacks.mlflow_logger import MLFlowLogger
from callbacks.model_checkpoint import ModelCheckpoint
from callbacks.model_summary import ModelSummary, RichModelSummary
from callbacks.on_exception_checkpoint import OnExceptionCheckpoint
from callbacks.prediction_writer import BasePredictionWriter
from callbacks.progress_bar import ProgressBar
from callbacks.ray_report import RayReportCallback
from callbacks.rich_progress_bar import RichProgressBar
from trainer.contracts.errors import MonitorKeyError
from trainer.contracts.run_lock import RunLockedError
from callbacks.service_timeout import ServiceUnreachableError
from callbacks.stochastic_weight_averaging import StochasticWeightAveraging
from callbacks.tensorboard_logger import TensorBoardLogger
from callbacks.throughput_monitor import ThroughputMonitor
from callbacks.timer import Timer
from callbacks.tqdm_progress_bar import TQDMProgressBar
from callbacks.wandb_logger import WandbLogger
from callbacks.weight_averaging import EMAWeightAveraging, WeightAveraging
from trainer.contracts import storage  # the storage layer, for loggers of your own (`from callbacks import storage`)

__all__ = [
    "BackboneFinetuning",
    "BaseFinetuning",
    "BasePredictionWriter",
    "BatchSizeFinder",
    "Callback",
    "Checkpoint",
    "CSVLogger",
    "EarlyStopping",
    "GradientAccumulationScheduler",
    "LambdaCallback",
    "LearningRateFinder",
    "LearningRateMonitor",
    "MLFlowLogger",
    "Logger",
    "ModelCheckpoint",
    "ModelSummary",
    "MonitorKeyError",
    "OnExceptionCheckpoint",
    "ProgressBar",
    "RayReportCallback",
    "RichModelSummary",
    "RichProgressBar",
    "RunLockedError",
    "ServiceUnreachableError",
    "StochasticWeightAveraging",
    "TensorBoardLogger",
    "ThroughputMonitor",
    "Timer",
    "TQDMProgressBar",
    "WandbLogger",
    "WeightAveraging",
    "EMAWeightAveraging",
]

# Lightning's callbacks and loggers that Lockstep does not provide (docs/migration.md): importing
# one names it and says so, rather than Python's bare "cannot import name".
NOT_PROVIDED = {
    "ModelPruning": "pruning",
    "SpikeDetection": "loss-spike detection",
    "DeviceStatsMonitor": "device statistics",
    "CometLogger": "Comet logging",
    "LitLogger": "Lightning's LitLogger",
    "NeptuneLogger": "Neptune logging",
}


def __getattr__(name: str) -> object:
    if name in NOT_PROVIDED:
        raise ImportError(
            f"callbacks.{name}: Lightning's {name} ({NOT_PROVIDED[name]}) is not provided by Lockstep; "
            "docs/migration.md lists what is not provided and what to use instead."
        )
    raise AttributeError(f"module 'callbacks' has no attribute {name!r}")
