"""pytorch-forecasting (time series): its TemporalFusionTransformer quick-start on a synthetic panel.

Drives the library's own LightningModule (`TemporalFusionTransformer.from_dataset`, its
`BaseModel` hooks and logging), its `QuantileLoss` metric, an `EarlyStopping` callback, and its
`predict`, which builds a second Trainer of its own.
"""
import lightning.pytorch as pl
import numpy as np
import pandas as pd
from lightning.pytorch.callbacks import EarlyStopping
from pytorch_forecasting import TemporalFusionTransformer, TimeSeriesDataSet
from pytorch_forecasting.metrics import QuantileLoss

import _record

_record.seed(0)
rng = np.random.default_rng(0)
rows = [{"series": str(s), "time_idx": t, "value": float(np.sin(t / 4 + s) + 0.1 * rng.normal())}
        for s in range(4) for t in range(40)]
data = pd.DataFrame(rows)
cutoff = 30
common = dict(time_idx="time_idx", target="value", group_ids=["series"], max_encoder_length=8,
              max_prediction_length=4, static_categoricals=["series"], time_varying_known_reals=["time_idx"],
              time_varying_unknown_reals=["value"])
training = TimeSeriesDataSet(data[data.time_idx <= cutoff], **common)
validation = TimeSeriesDataSet.from_dataset(training, data, min_prediction_idx=cutoff + 1, stop_randomization=True)
train_loader = training.to_dataloader(train=False, batch_size=16, num_workers=0)
val_loader = validation.to_dataloader(train=False, batch_size=16, num_workers=0)

model = TemporalFusionTransformer.from_dataset(training, learning_rate=0.03, hidden_size=8, attention_head_size=1,
                                               dropout=0.0, hidden_continuous_size=4, loss=QuantileLoss())
trainer = pl.Trainer(accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False, gradient_clip_val=0.1,
                     callbacks=[EarlyStopping(monitor="val_loss", patience=5)], **_record.trainer_kwargs())
trainer.fit(model, train_dataloaders=train_loader, val_dataloaders=val_loader)
predictions = model.predict(val_loader, trainer_kwargs=dict(accelerator="cpu", devices=1, logger=False,
                                                              enable_progress_bar=False))
_record.save(trainer, model, predictions, val_loss=trainer.callback_metrics.get("val_loss"))
