"""chemprop v2 (chemistry): its MPNN training quick-start on synthetic molecules (SMILES of small
chains, target: a noisy count of their heavy atoms).

Drives the library's own LightningModule (`models.MPNN`: `BondMessagePassing`, `MeanAggregation`,
`RegressionFFN` with its `UnscaleTransform`, its metrics logged through `self.log`), its
dataloaders (`data.build_dataloader`, its collate and sampler), a `ModelCheckpoint`, and
`trainer.fit`, `trainer.test` and `trainer.predict`.
"""
import lightning.pytorch as pl
import numpy as np
from chemprop import data, featurizers, models, nn
from lightning.pytorch.callbacks import ModelCheckpoint

import _record

_record.seed(0)
rng = np.random.default_rng(0)
smiles = [c * k + tail for k in range(1, 9) for c in ("C",) for tail in ("", "O", "N", "C(=O)O", "Cl")]
targets = [[float(len(s.replace("(", "").replace(")", "").replace("=", "").replace("l", "")) + 0.1 * rng.normal())]
           for s in smiles]
points = [data.MoleculeDatapoint.from_smi(s, y) for s, y in zip(smiles, np.asarray(targets))]
train_idx, val_idx, test_idx = data.make_split_indices([p.mol for p in points], "random", (0.7, 0.15, 0.15), seed=0)
train, val, test = data.split_data_by_indices(points, train_idx, val_idx, test_idx)
featurizer = featurizers.SimpleMoleculeMolGraphFeaturizer()
train_set = data.MoleculeDataset(train[0], featurizer)
scaler = train_set.normalize_targets()
val_set = data.MoleculeDataset(val[0], featurizer)
val_set.normalize_targets(scaler)
test_set = data.MoleculeDataset(test[0], featurizer)
train_loader = data.build_dataloader(train_set, batch_size=8, num_workers=0, seed=0)
val_loader = data.build_dataloader(val_set, batch_size=8, num_workers=0, shuffle=False)
test_loader = data.build_dataloader(test_set, batch_size=8, num_workers=0, shuffle=False)

ffn = nn.RegressionFFN(output_transform=nn.UnscaleTransform.from_standard_scaler(scaler), input_dim=16, hidden_dim=16)
mpnn = models.MPNN(nn.BondMessagePassing(d_h=16), nn.MeanAggregation(), ffn, batch_norm=True,
                   metrics=[nn.metrics.RMSE(), nn.metrics.MAE()])
checkpoint = ModelCheckpoint(dirpath="checkpoints", monitor="val_loss", mode="min", save_last=True)
trainer = pl.Trainer(accelerator="cpu", logger=False, max_epochs=2, callbacks=[checkpoint], **_record.trainer_kwargs())
trainer.fit(mpnn, train_loader, val_loader)
tested = trainer.test(mpnn, test_loader)
predictions = trainer.predict(mpnn, test_loader)
_record.save(trainer, mpnn, predictions, tested=tested)
