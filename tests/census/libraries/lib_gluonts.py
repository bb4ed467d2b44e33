"""GluonTS (time series, its torch models): `DeepAREstimator` on a synthetic dataset of four series,
the library's quick-start.

Drives the library's own Trainer construction (`PyTorchLightningEstimator.train` builds
`pl.Trainer(**trainer_kwargs)` with its own `ModelCheckpoint`, then loads the best checkpoint back
with `load_from_checkpoint`), its `DeepARLightningModule` (`training_step`, `validation_step`, `log`),
its iterable training loader, and the predictor's sampling. The library's trainer is not kept, so a
callback of ours keeps it.
"""
import lightning.pytorch as pl
import numpy as np
import pandas as pd
import torch
from gluonts.dataset.common import ListDataset
from gluonts.torch import DeepAREstimator

import _record

FITTED = []


class KeepTrainer(pl.Callback):
    def on_fit_end(self, trainer, pl_module):
        FITTED.append(trainer)


_record.seed(0)
rng = np.random.default_rng(0)
start = pd.Period("2024-01-01", freq="D")
series = [{"start": start, "target": np.sin(np.arange(80) / 4 + s) + 0.1 * rng.normal(size=80)} for s in range(4)]
train = ListDataset([{**s, "target": s["target"][:-8]} for s in series], freq="D")
test = ListDataset(series, freq="D")
kwargs = _record.library_kwargs(max_epochs=2, logger=False, callbacks=[KeepTrainer()])
estimator = DeepAREstimator(prediction_length=8, context_length=16, freq="D", num_layers=1, hidden_size=8,
                            batch_size=8, num_batches_per_epoch=4, lr=1e-2, trainer_kwargs=kwargs)
predictor = estimator.train(training_data=train, validation_data=train, shuffle_buffer_length=None)
torch.manual_seed(1)  # the forecasts are sample paths: the same draws on both sides
forecasts = [f.samples for f in predictor.predict(test)]
_record.save(FITTED[-1], predictor.prediction_net, forecasts)
