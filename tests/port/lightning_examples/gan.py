"""A GAN with two optimizers in manual optimization, in the style of Lightning's basic GAN example.

One deliberate change from that example: the noise comes with the data (each sample carries its
own ``z``) instead of ``torch.randn`` in ``training_step``, so the same run on 2 ranks sees exactly
the samples (and noise) of the 1-process run's whole batch.
"""
import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import lightning.pytorch as L
from lightning.pytorch.loggers import TensorBoardLogger

LATENT_DIM = 4


def make_images_and_noise(n: int = 32) -> TensorDataset:
    g = torch.Generator().manual_seed(5)
    images = torch.tanh(torch.randn(n, 1, 4, 4, generator=g) + 0.5)
    return TensorDataset(images, torch.randn(n, LATENT_DIM, generator=g))


class Generator(nn.Module):
    def __init__(self, latent_dim: int, img_shape=(1, 4, 4)):
        super().__init__()
        self.img_shape = img_shape
        self.model = nn.Sequential(nn.Linear(latent_dim, 32), nn.LeakyReLU(0.2), nn.Linear(32, 16), nn.Tanh())

    def forward(self, z):
        return self.model(z).view(z.size(0), *self.img_shape)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(nn.Flatten(), nn.Linear(16, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1), nn.Sigmoid())

    def forward(self, img):
        return self.model(img)


class GAN(L.LightningModule):
    def __init__(self, latent_dim: int = LATENT_DIM, lr: float = 0.002, b1: float = 0.5, b2: float = 0.999):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = Generator(latent_dim)
        self.discriminator = Discriminator()

    def forward(self, z):
        return self.generator(z)

    def adversarial_loss(self, y_hat, y):
        return F.binary_cross_entropy(y_hat, y)

    def training_step(self, batch, batch_idx):
        imgs, z = batch
        optimizer_g, optimizer_d = self.optimizers()

        # train the generator
        self.toggle_optimizer(optimizer_g)
        generated_imgs = self(z)
        if self.global_step == 0:
            grid = torchvision.utils.make_grid(generated_imgs[:6])
            self.logger.experiment.add_image("train/generated_images", grid, 0)
        valid = torch.ones(imgs.size(0), 1).type_as(imgs)
        g_loss = self.adversarial_loss(self.discriminator(generated_imgs), valid)
        self.manual_backward(g_loss)
        optimizer_g.step()
        optimizer_g.zero_grad()
        self.untoggle_optimizer(optimizer_g)

        # train the discriminator
        self.toggle_optimizer(optimizer_d)
        real_loss = self.adversarial_loss(self.discriminator(imgs), valid)
        fake = torch.zeros(imgs.size(0), 1).type_as(imgs)
        fake_loss = self.adversarial_loss(self.discriminator(self(z).detach()), fake)
        d_loss = (real_loss + fake_loss) / 2
        self.manual_backward(d_loss)
        optimizer_d.step()
        optimizer_d.zero_grad()
        self.untoggle_optimizer(optimizer_d)

        self.log_dict({"g_loss": g_loss, "d_loss": d_loss}, prog_bar=True)

    def configure_optimizers(self):
        lr, b1, b2 = self.hparams.lr, self.hparams.b1, self.hparams.b2
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(b1, b2))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(b1, b2))
        return [opt_g, opt_d], []

    def on_train_epoch_end(self):
        z = torch.linspace(-1, 1, 6 * LATENT_DIM).view(6, LATENT_DIM).type_as(self.generator.model[0].weight)
        grid = torchvision.utils.make_grid(self(z))
        self.logger.experiment.add_image("epoch/generated_images", grid, self.current_epoch)


def main(root_dir, batch_size=8, **trainer_kwargs):
    L.seed_everything(11)
    model = GAN()
    # data order is fixed (no shuffle), so 2 ranks with half the batch each see the same global batches
    train_loader = DataLoader(make_images_and_noise(), batch_size=batch_size)
    logger = TensorBoardLogger(save_dir=root_dir, name="gan")
    trainer = L.Trainer(accelerator="cpu", default_root_dir=root_dir, max_epochs=2, log_every_n_steps=1, logger=logger, **trainer_kwargs)
    trainer.fit(model, train_loader)
    return model, trainer
