"""A GAN trained with manual optimization: two optimizers, toggle_optimizer, manual_backward.

    python examples/gan.py                  # one process
    python examples/gan.py --devices 2      # two processes, DDP (the Trainer starts them)
    tensorboard --logdir gan_run/logs       # SCALARS: g_loss, d_loss, mode_distance; IMAGES: the densities

The data are points in the plane drawn around 8 centres on a circle of radius 2 (no download).
A generator maps Gaussian noise to points; a discriminator tells its points from real ones.
Each training step updates the generator, then the discriminator, each with its own optimizer:
`self.toggle_optimizer(opt)` leaves only that optimizer's parameters trainable, and
`self.manual_backward(loss)` back-propagates and, with several processes, averages the gradients
over them. Every process draws its own noise.

After each epoch `mode_distance` is logged: the mean distance from a generated point to the
nearest centre (about 1.2 for the untrained generator, about 0.3 after the default 30 epochs,
when the generated points lie on the circle through the centres), and rank 0 writes an image to
TensorBoard: the density of real points (left) and generated ones (right).
"""
from __future__ import annotations

import argparse
import json
import math
import os
from typing import Any

import torch
from torch import nn
from torch.nn.functional import softplus
from torch.utils.data import DataLoader, TensorDataset

from trainer import Trainer, TrainModule, seed_everything

MODES, RADIUS, SPREAD = 8, 2.0, 0.05


def centres() -> torch.Tensor:
    angles = torch.arange(MODES) * (2 * math.pi / MODES)
    return RADIUS * torch.stack([angles.cos(), angles.sin()], dim=1)


def ring_of_gaussians(n: int, seed: int = 0) -> TensorDataset:
    """``n`` points, each near one of the ``MODES`` centres (standard deviation ``SPREAD``)."""
    g = torch.Generator().manual_seed(seed)
    which = torch.randint(MODES, (n,), generator=g)
    return TensorDataset(centres()[which] + SPREAD * torch.randn(n, 2, generator=g))


def density_image(points: torch.Tensor, bins: int = 128, extent: float = 3.0) -> torch.Tensor:
    """A [3, bins, bins] grey image of where ``points`` lie in [-extent, extent]^2 (y up)."""
    hist = torch.histogramdd(points.float().cpu(), bins=[bins, bins], range=[-extent, extent] * 2).hist
    image = (hist / hist.max().clamp(min=1)).T.flip(0)  # rows = y, from the top
    return image.expand(3, bins, bins)


def mlp(inputs: int, outputs: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.LeakyReLU(0.2), nn.Linear(hidden, hidden),
                         nn.LeakyReLU(0.2), nn.Linear(hidden, outputs))


class GAN(TrainModule):
    """Generator and discriminator MLPs; the non-saturating GAN losses.

    Args:
        latent_dim: Size of the generator's noise input.
        hidden: Width of both MLPs.
        lr: Adam's learning rate, for both optimizers.
        seed: Seeds the noise (plus the global rank, so every process draws its own).
    """

    def __init__(self, latent_dim: int = 8, hidden: int = 128, lr: float = 1e-3, seed: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = mlp(latent_dim, 2, hidden)
        self.discriminator = mlp(2, 1, hidden)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.generator(z)

    def on_fit_start(self) -> None:
        self.noise = torch.Generator(self.device).manual_seed(self.hparams.seed + self.trainer.global_rank)

    def _z(self, n: int) -> torch.Tensor:
        return torch.randn(n, self.hparams.latent_dim, generator=self.noise, device=self.device)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        (real,) = batch
        opt_g, opt_d = self.optimizers()

        # generator: make the discriminator call its points real
        self.toggle_optimizer(opt_g)  # the discriminator's parameters get no gradient here
        fake = self(self._z(real.size(0)))
        g_loss = softplus(-self.discriminator(fake)).mean()
        self.manual_backward(g_loss)
        opt_g.step()
        opt_g.zero_grad()
        self.untoggle_optimizer(opt_g)

        # discriminator: real points -> high logits, generated ones -> low
        with self.toggled_optimizer(opt_d):
            d_loss = softplus(-self.discriminator(real)).mean() + softplus(self.discriminator(fake.detach())).mean()
            self.manual_backward(d_loss)
            opt_d.step()
            opt_d.zero_grad()

        self.log_dict({"g_loss": g_loss, "d_loss": d_loss}, prog_bar=True)

    def on_train_epoch_end(self) -> None:
        # the same noise every epoch, so the images show how one set of points moves
        z = torch.randn(2048, self.hparams.latent_dim, generator=torch.Generator().manual_seed(1234)).to(self.device)
        with torch.no_grad():
            points = self(z)
        nearest = torch.cdist(points, centres().to(points)).min(dim=1).values
        self.log("mode_distance", nearest.mean(), prog_bar=True)
        if self.logger is not None:  # on ranks other than 0 the experiment does nothing
            real = self.trainer.train_dataloader.dataset.tensors[0][:2048]
            gap = torch.ones(3, 128, 2)
            image = torch.cat([density_image(real), gap, density_image(points)], dim=2)
            self.logger.experiment.add_image("density/real_vs_generated", image, self.current_epoch)

    def on_fit_end(self) -> None:
        # manual_backward averaged every gradient over the processes, so all hold the same weights
        weights = torch.nn.utils.parameters_to_vector(self.parameters()).detach()
        every_rank = self.trainer.strategy.all_gather(weights).view(-1, weights.numel())
        self.rank_spread = (every_rank - weights).abs().max().item()

    def configure_optimizers(self) -> Any:
        lr, betas = self.hparams.lr, (0.5, 0.999)
        return [torch.optim.Adam(self.generator.parameters(), lr=lr, betas=betas),
                torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=betas)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", default="auto", help="processes on this machine (default: auto)")
    parser.add_argument("--accelerator", default="auto", help="cpu, cuda or auto")
    parser.add_argument("--max-epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=128, help="micro batch per process")
    parser.add_argument("--train-size", type=int, default=8192, help="points in the data set")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--log-every-n-steps", type=int, default=10, help="batches between logged losses")
    parser.add_argument("--root", default="gan_run", help="default_root_dir (logs, checkpoints)")
    parser.add_argument("--result-json", default=None, help="write the final metrics here (rank 0)")
    args = parser.parse_args(argv)

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    seed_everything(0)
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        max_epochs=args.max_epochs,
        default_root_dir=args.root,
        log_every_n_steps=args.log_every_n_steps,
    )
    model = GAN(lr=args.lr)
    trainer.fit(model, DataLoader(ring_of_gaussians(args.train_size), batch_size=args.batch_size, shuffle=True))
    if not trainer.is_global_zero:
        return
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    print(f"mode_distance={metrics['mode_distance']:.4f} g_loss={metrics['g_loss']:.4f} "
          f"d_loss={metrics['d_loss']:.4f} world_size={trainer.world_size} steps={trainer.global_step} "
          f"weights differ across ranks by {model.rank_spread:.1e} log_dir={trainer.log_dir}")
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump({**metrics, "world_size": trainer.world_size, "global_step": trainer.global_step,
                       "rank_spread": model.rank_spread, "log_dir": trainer.log_dir}, f)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
