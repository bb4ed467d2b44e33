"""Harness entry for lightning-hydra-template's MNIST module and datamodule (vendored unchanged).

The template builds them from its Hydra configs; this entry builds what ``src/train.py`` builds
from ``configs/train.yaml`` with its default ``model/mnist.yaml``, ``data/mnist.yaml`` and
``callbacks/default.yaml`` (checkpoint and early stopping on ``val/acc``; the rich progress bar and
summary left out), then fits and tests the best checkpoint, as ``src/train.py`` does.
"""
from functools import partial

import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from mnist_datamodule import MNISTDataModule
from mnist_module import MNISTLitModule
from simple_dense_net import SimpleDenseNet

if __name__ == "__main__":
    net = SimpleDenseNet(input_size=784, lin1_size=64, lin2_size=128, lin3_size=64, output_size=10)
    model = MNISTLitModule(
        net=net,
        optimizer=partial(torch.optim.Adam, lr=0.001, weight_decay=0.0),
        scheduler=partial(torch.optim.lr_scheduler.ReduceLROnPlateau, mode="min", factor=0.1, patience=10),
        compile=False,
    )
    datamodule = MNISTDataModule(data_dir="data/", batch_size=128, train_val_test_split=(55_000, 5_000, 10_000))
    checkpoint = ModelCheckpoint(dirpath="checkpoints", filename="epoch_{epoch:03d}", monitor="val/acc", mode="max",
                                 save_last=True, auto_insert_metric_name=False)
    early_stopping = EarlyStopping(monitor="val/acc", patience=100, mode="max")
    # configs/trainer/default.yaml
    trainer = L.Trainer(min_epochs=1, max_epochs=10, accelerator="cpu", devices=1, check_val_every_n_epoch=1,
                        deterministic=False, callbacks=[checkpoint, early_stopping])
    trainer.fit(model=model, datamodule=datamodule)
    trainer.test(model=model, datamodule=datamodule, ckpt_path=trainer.checkpoint_callback.best_model_path or None)
