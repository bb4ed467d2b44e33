"""An autoencoder fed by a LightningDataModule, in the style of Lightning's autoencoder example."""
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

import lightning.pytorch as L


class RandomImagesDataModule(L.LightningDataModule):
    def __init__(self, batch_size: int = 16, num_samples: int = 120):
        super().__init__()
        self.save_hyperparameters()

    def prepare_data(self):
        pass  # a real project downloads here (once per node)

    def setup(self, stage):
        images = torch.rand(self.hparams.num_samples, 1, 6, 6, generator=torch.Generator().manual_seed(3))
        full = TensorDataset(images)
        self.train_set, self.val_set = random_split(full, [96, 24], generator=torch.Generator().manual_seed(4))

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)


class LitAutoEncoder(L.LightningModule):
    def __init__(self, latent_dim: int = 4, lr: float = 1e-2):
        super().__init__()
        self.save_hyperparameters()
        self.encoder = nn.Sequential(nn.Flatten(), nn.Linear(36, 16), nn.ReLU(), nn.Linear(16, latent_dim))
        self.decoder = nn.Sequential(nn.Linear(latent_dim, 16), nn.ReLU(), nn.Linear(16, 36))

    def forward(self, x):
        return self.decoder(self.encoder(x)).view(-1, 1, 6, 6)

    def training_step(self, batch, batch_idx):
        (x,) = batch
        loss = F.mse_loss(self(x), x)
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        (x,) = batch
        self.log("val_loss", F.mse_loss(self(x), x))

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


def main(root_dir, **trainer_kwargs):
    L.seed_everything(7)
    model = LitAutoEncoder()
    datamodule = RandomImagesDataModule()
    trainer = L.Trainer(accelerator="cpu", default_root_dir=root_dir, max_epochs=3, log_every_n_steps=2, **trainer_kwargs)
    trainer.fit(model, datamodule=datamodule)
    return model, trainer
