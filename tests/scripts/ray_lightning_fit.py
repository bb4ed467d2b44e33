"""A Lightning script on Ray Train as Ray documents it (``ray.train.lightning``: `RayDDPStrategy`,
`RayLightningEnvironment`, `RayTrainReportCallback`, `prepare_trainer`), for the differential test
tests/launch/test_ray_lightning.py: ``python SCRIPT OUT STORAGE`` runs it on Lightning,
``python -m trainer.as_lightning SCRIPT OUT STORAGE`` on Lockstep.

It starts its own local Ray cluster (2 CPUs, 2 workers, gloo), so that Ray's workers are children
of the process the runner started (they get the alias as every child does). Rank 0 saves the final
parameters, the step count and which framework ran to OUT; the driver adds what Ray's result holds.
"""
from __future__ import annotations

import sys
from pathlib import Path

import lightning.pytorch as pl
import ray
import ray.train
import torch
from ray.train import RunConfig, ScalingConfig
from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment, RayTrainReportCallback, prepare_trainer
from ray.train.torch import TorchTrainer
from torch.utils.data import DataLoader, TensorDataset

N = 37  # odd: Lightning's DistributedSampler pads the ranks' shares to 19 each
BATCH, EPOCHS, SEED = 4, 2, 7


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def data() -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(N, 3, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(N, 1, generator=generator))


def train_func(config: dict) -> None:
    pl.seed_everything(SEED)
    module = Regression()
    trainer = pl.Trainer(
        max_epochs=EPOCHS, accelerator="cpu", devices="auto", strategy=RayDDPStrategy(),
        plugins=[RayLightningEnvironment()], callbacks=[RayTrainReportCallback()],
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False, logger=False,
    )
    trainer = prepare_trainer(trainer)
    trainer.fit(module, DataLoader(data(), batch_size=BATCH, shuffle=True))
    if trainer.global_rank == 0:
        torch.save({
            "params": [p.detach().clone() for p in module.parameters()],
            "global_step": trainer.global_step,
            "trainer": type(trainer).__module__,
            "callbacks": [type(cb).__name__ for cb in trainer.callbacks],
        }, config["out"])


if __name__ == "__main__":
    out, storage = sys.argv[1], sys.argv[2]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    result = TorchTrainer(
        train_func, train_loop_config={"out": out}, scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage, name="lightning-on-ray"),
    ).fit()
    outcome = torch.load(out)
    outcome["reports"] = [(m["epoch"], m["step"], m["train_loss"]) for _, m in result.best_checkpoints]
    outcome["checkpoint_files"] = sorted(p.name for p in Path(result.checkpoint.path).iterdir())
    torch.save(outcome, out)
    ray.shutdown()
