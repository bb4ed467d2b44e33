"""neuralforecast (time series): `NeuralForecast` with an `NHITS` model on a synthetic panel of four
series, written against ``pytorch_lightning`` as the library is.

Drives the library's own Trainer construction (`BaseModel.fit` builds `pl.Trainer(**trainer_kwargs)`
with `max_steps`, an int `val_check_interval` over epochs and `check_val_every_n_epoch=None`, its
`EarlyStopping`), its `TimeSeriesDataModule`, its LightningModule, and `NeuralForecast.predict`, which
builds a second Trainer. The library drops the fitted model's trainer, so a callback of ours keeps it.
"""
import numpy as np
import pandas as pd
import pytorch_lightning as pl
from neuralforecast import NeuralForecast
from neuralforecast.models import NHITS

import _record


FITTED = []  # a global: the library copies the model, and its trainer arguments with it


class KeepTrainer(pl.Callback):
    def on_fit_end(self, trainer, pl_module):
        FITTED.append(trainer)


_record.seed(0)
rng = np.random.default_rng(0)
frame = pd.DataFrame([{"unique_id": f"s{s}", "ds": t, "y": float(np.sin(t / 3 + s) + 0.1 * rng.normal())}
                      for s in range(4) for t in range(60)])
kwargs = _record.library_kwargs(logger=False, enable_checkpointing=False, callbacks=[KeepTrainer()])
model = NHITS(h=4, input_size=8, max_steps=12, val_check_steps=5, early_stop_patience_steps=3,
              n_blocks=[1, 1, 1], mlp_units=[[16, 16]] * 3, batch_size=4, windows_batch_size=16,
              learning_rate=1e-2, random_seed=0, **kwargs)
forecaster = NeuralForecast(models=[model], freq=1)
forecaster.fit(frame, val_size=8)
predictions = forecaster.predict()
_record.save(FITTED[-1], forecaster.models[0], predictions)
