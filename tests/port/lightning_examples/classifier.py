"""A classifier that brings its own data (train_dataloader / val_dataloader) and logs a torchmetrics
Accuracy, in the style of Lightning's image-classifier examples (synthetic data: no download)."""
import torch
import torch.nn.functional as F
import torchmetrics
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import lightning.pytorch as L


def make_blobs(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    x = torch.randn(n, 8, generator=g) + 2.0 * F.one_hot(y, 8).float()
    return TensorDataset(x, y)


class LitClassifier(L.LightningModule):
    def __init__(self, hidden_dim: int = 16, learning_rate: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(nn.Linear(8, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 3))
        self.train_acc = torchmetrics.Accuracy(task="multiclass", num_classes=3)
        self.val_acc = torchmetrics.Accuracy(task="multiclass", num_classes=3)

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.train_acc(logits, y)
        self.log("train_loss", loss)
        self.log("train_acc", self.train_acc, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.val_acc.update(logits, y)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", self.val_acc, prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate, momentum=0.9)

    def train_dataloader(self):
        return DataLoader(make_blobs(96, seed=1), batch_size=16, shuffle=True)

    def val_dataloader(self):
        return DataLoader(make_blobs(40, seed=2), batch_size=16)


def main(root_dir, **trainer_kwargs):
    L.seed_everything(42)
    model = LitClassifier()
    trainer = L.Trainer(accelerator="cpu", default_root_dir=root_dir, max_epochs=3, log_every_n_steps=2, **trainer_kwargs)
    trainer.fit(model)
    return model, trainer
