"""torchgeo (geospatial): its `SemanticSegmentationTask` (an FCN) on synthetic 4-band image chips with
masks, in the ``{"image", "mask"}`` samples torchgeo's datasets give.

Drives the library's own LightningModule (`BaseTask`: `configure_models`, its torchmetrics
`MetricCollection`s logged per split, its `ReduceLROnPlateau` schedule monitoring `val_loss`,
`predict_step`), with `trainer.fit`, `trainer.test` and `trainer.predict`.
"""
import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset
from torchgeo.trainers import SemanticSegmentationTask

import _record


class Chips(Dataset):
    def __init__(self, n, offset):
        generator = torch.Generator().manual_seed(offset)
        self.images = torch.rand(n, 4, 32, 32, generator=generator)
        self.masks = (self.images[:, 3] > self.images[:, 0]).long()  # "vegetation" where band 4 beats band 1

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return {"image": self.images[index], "mask": self.masks[index]}


_record.seed(0)
task = SemanticSegmentationTask(model="fcn", in_channels=4, num_classes=2, num_filters=8, loss="ce", lr=1e-2)
train, val = DataLoader(Chips(32, 1), batch_size=8, shuffle=True), DataLoader(Chips(16, 2), batch_size=8)
trainer = pl.Trainer(accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False, **_record.trainer_kwargs())
trainer.fit(task, train, val)
tested = trainer.test(task, val)
predictions = trainer.predict(task, val)
_record.save(trainer, task, predictions, tested=tested)
