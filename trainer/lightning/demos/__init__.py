"""Lockstep's own versions of Lightning's demos (``lightning.pytorch.demos``): small models, data
modules and datasets for examples, bug reports and tests, giving Lightning 2.6's numbers for the same
seed. One module per Lightning submodule: `boring_classes`, `mnist_datamodule`, `transformer`,
`lstm`; this package exports what Lightning's ``demos`` package exports.
"""
from trainer.lightning.demos.boring_classes import BoringDataModule, BoringModel, DemoModel
from trainer.lightning.demos.lstm import LightningLSTM, SequenceSampler, SimpleLSTM
from trainer.lightning.demos.transformer import LightningTransformer, Transformer, WikiText2

__all__ = [
    "LightningLSTM",
    "SequenceSampler",
    "SimpleLSTM",
    "LightningTransformer",
    "Transformer",
    "WikiText2",
    "BoringModel",
    "BoringDataModule",
    "DemoModel",
]
