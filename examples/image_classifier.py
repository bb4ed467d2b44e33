"""Train a torchvision classifier (ResNet-18 by default) on CIFAR-10, MNIST or FakeData.

    python examples/image_classifier.py                                  # FakeData: offline, one process
    python examples/image_classifier.py --dataset cifar10 --devices 2    # download once per node, DDP
    python examples/image_classifier.py --dataset mnist --arch resnet34 --devices 2 --sync-batchnorm
    python examples/image_classifier.py --devices 2 --accumulate 4 --scale-lr linear
    python examples/image_classifier.py --precision bf16-mixed --channels-last --compile
    torchrun --nproc_per_node 2 examples/image_classifier.py --dataset cifar10

`--dataset fake` (the default) is torchvision's FakeData: random images with random labels, for
checking the pipeline and the speed without a download; its accuracy stays at chance (0.1).
CIFAR-10 and MNIST download into `--data-dir` in the DataModule's `prepare_data`, which the
Trainer runs on one process per node while the others wait; every process then reads the files
in `setup`. MNIST's grey images are repeated to 3 channels, so every `--arch` fits every data set.
TensorBoard logs go to <root>/logs/version_N: `tensorboard --logdir <root>/logs`.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

import torch
import torchvision
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

from trainer import DataModule, Trainer, TrainModule, seed_everything

NUM_CLASSES = 10
# Per data set: native image size, per-channel mean and standard deviation of the training images.
DATASETS: dict[str, tuple[int, tuple[float, ...], tuple[float, ...]]] = {
    "fake": (32, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
    "cifar10": (32, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "mnist": (28, (0.1307,) * 3, (0.3081,) * 3),
}


class ImageData(DataModule):
    """Train and validation splits of ``dataset`` with torchvision transforms.

    Args:
        dataset: ``"fake"``, ``"cifar10"`` or ``"mnist"``.
        data_dir: Where CIFAR-10 / MNIST are downloaded to and read from.
        batch_size: Micro batch per process.
        image_size: Side of the square images the model gets (``None``: the data set's own).
        fake_size: Training images of FakeData (validation: a quarter as many).
        num_workers: DataLoader worker processes per training process.
    """

    def __init__(self, dataset: str = "fake", data_dir: str = "data", batch_size: int = 64,
                 image_size: int | None = None, fake_size: int = 2048, num_workers: int = 2) -> None:
        super().__init__()
        if dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {sorted(DATASETS)}, got {dataset!r}")
        self.save_hyperparameters()

    def _source(self) -> Any:
        return {"cifar10": torchvision.datasets.CIFAR10, "mnist": torchvision.datasets.MNIST}[self.hparams.dataset]

    def prepare_data(self) -> None:
        """Download the real data sets (the Trainer runs this on local rank 0 only)."""
        if self.hparams.dataset == "fake":
            return
        for train in (True, False):
            try:
                self._source()(self.hparams.data_dir, train=train, download=True)
            except (OSError, RuntimeError) as err:  # no network, a proxy, a broken mirror, a full disk
                raise RuntimeError(
                    f"Could not download {self.hparams.dataset} into {self.hparams.data_dir!r}: {err}. "
                    "Without network access copy the data set there (torchvision's layout), or use "
                    "--dataset fake."
                ) from err

    def _transforms(self, train: bool) -> transforms.Compose:
        native, mean, std = DATASETS[self.hparams.dataset]
        size = self.hparams.image_size or native
        steps: list[Any] = []
        if self.hparams.dataset == "mnist":
            steps.append(transforms.Grayscale(num_output_channels=3))
        if size != native:
            steps.append(transforms.Resize(size))
        if train:
            steps.append(transforms.RandomCrop(size, padding=size // 8))
            if self.hparams.dataset != "mnist":  # a mirrored digit is another digit, or none
                steps.append(transforms.RandomHorizontalFlip())
        steps += [transforms.ToTensor(), transforms.Normalize(mean, std)]
        return transforms.Compose(steps)

    def _dataset(self, train: bool) -> Dataset:
        name, transform = self.hparams.dataset, self._transforms(train)
        if name == "fake":
            size = self.hparams.fake_size if train else max(1, self.hparams.fake_size // 4)
            side = self.hparams.image_size or DATASETS["fake"][0]
            # random_offset keeps the validation images apart from the training images
            return torchvision.datasets.FakeData(size, (3, side, side), NUM_CLASSES, transform,
                                                 random_offset=0 if train else self.hparams.fake_size)
        return self._source()(self.hparams.data_dir, train=train, download=False, transform=transform)

    def setup(self, stage: str) -> None:
        """Read the data every process needs (never downloads: that is ``prepare_data``'s job)."""
        self.train_set, self.val_set = self._dataset(train=True), self._dataset(train=False)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True,
                          num_workers=self.hparams.num_workers, persistent_workers=self.hparams.num_workers > 0)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=2 * self.hparams.batch_size, num_workers=self.hparams.num_workers)


class ImageClassifier(TrainModule):
    """A torchvision classification model trained with SGD (momentum, Nesterov) and cosine decay.

    Args:
        arch: A model name of ``torchvision.models`` (``resnet18``, ``resnet50``, ``mobilenet_v3_small``...).
        lr: Learning rate for one process (``--scale-lr`` multiplies it by the world size).
        weight_decay: SGD's L2 penalty.
    """

    def __init__(self, arch: str = "resnet18", lr: float = 0.05, weight_decay: float = 5e-4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torchvision.models.get_model(arch, weights=None, num_classes=NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        # sync_dist: every rank validates its own shard; the logged values are over all of them
        self.log("val_loss", nn.functional.cross_entropy(logits, y), sync_dist=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), sync_dist=True, prog_bar=True)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9, nesterov=True,
                              weight_decay=self.hparams.weight_decay)
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, self.trainer.max_epochs))
        return {"optimizer": opt, "lr_scheduler": cosine}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="resnet18", help="a torchvision.models classifier (default resnet18)")
    parser.add_argument("--dataset", default="fake", choices=sorted(DATASETS), help="fake needs no download")
    parser.add_argument("--data-dir", default="data", help="where cifar10/mnist are downloaded to")
    parser.add_argument("--image-size", type=int, default=None, help="default: the data set's (32 or 28)")
    parser.add_argument("--fake-size", type=int, default=2048, help="FakeData training images")
    parser.add_argument("--num-workers", type=int, default=2, help="DataLoader workers per process")
    parser.add_argument("--devices", default="auto", help="processes per node (default: auto)")
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--accelerator", default="auto", help="cpu, cuda or auto")
    parser.add_argument("--strategy", default="auto", help="auto, ddp, allreduce, ddp_spawn")
    parser.add_argument("--sync-batchnorm", action="store_true", help="BatchNorm statistics over all ranks")
    parser.add_argument("--scale-lr", default="none", choices=["none", "linear", "sqrt"],
                        help="multiply --lr by the world size W (linear) or sqrt(W)")
    parser.add_argument("--accumulate", type=int, default=1, help="accumulate_grad_batches (A)")
    parser.add_argument("--precision", default="32-true", help="32-true, bf16-mixed, 16-mixed (CUDA)")
    parser.add_argument("--channels-last", action="store_true", help="model and images in channels_last")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (needs a C++ compiler on CPU)")
    parser.add_argument("--max-epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64, help="micro batch per process (b)")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--limit-batches", type=int, default=None, help="train and validation batches per epoch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", default="image_classifier_run", help="default_root_dir (logs, checkpoints)")
    parser.add_argument("--result-json", default=None, help="write the final metrics here (rank 0)")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.arch not in torchvision.models.list_models(module=torchvision.models):
        parser.error(f"--arch {args.arch!r} is not a torchvision.models classifier; e.g. resnet18, resnet50, "
                     "mobilenet_v3_small, efficientnet_b0")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    seed_everything(args.seed)
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        num_nodes=args.num_nodes,
        strategy=args.strategy,
        max_epochs=args.max_epochs,
        sync_batchnorm=args.sync_batchnorm,
        scale_lr={"none": False, "linear": True, "sqrt": "sqrt"}[args.scale_lr],
        accumulate_grad_batches=args.accumulate,
        precision=args.precision,
        channels_last=args.channels_last,
        compile=args.compile,
        limit_train_batches=args.limit_batches,
        limit_val_batches=args.limit_batches,
        default_root_dir=args.root,
        log_every_n_steps=10,
        num_sanity_val_steps=0,
    )
    data = ImageData(args.dataset, args.data_dir, args.batch_size, args.image_size, args.fake_size, args.num_workers)
    model = ImageClassifier(args.arch, lr=args.lr)
    trainer.fit(model, datamodule=data)
    if not trainer.is_global_zero:
        return
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    result = {
        **metrics,
        "world_size": trainer.world_size,
        "global_step": trainer.global_step,
        "global_batch_size": trainer.global_batch_size,
        "precision": trainer.precision,
        "peak_lr": trainer.lr_scheduler_configs[0].scheduler.base_lrs[0],  # after --scale-lr
        "sync_batchnorm_layers": sum("SyncBatchNorm" in type(m).__name__ for m in trainer.model.modules()),
        "channels_last": any(p.dim() == 4 and p.is_contiguous(memory_format=torch.channels_last)
                             and not p.is_contiguous() for p in model.parameters()),
    }
    print(f"val_acc={metrics['val_acc']:.4f} val_loss={metrics['val_loss']:.4f} "
          f"train_loss={metrics['train_loss']:.4f} world_size={trainer.world_size} "
          f"global_batch={trainer.global_batch_size} steps={trainer.global_step} log_dir={trainer.log_dir}")
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
