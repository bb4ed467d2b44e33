"""Classify images that an NVIDIA DALI pipeline reads, decodes and augments, one shard per rank.

    pip install 'lockstep-trainer[dali]'
    python examples/dali_classifier.py                  # writes 3 classes of 16x16 PNGs, trains on the CPU
    python examples/dali_classifier.py --devices 2      # two processes, each reading its own shard
    torchrun --nproc_per_node 2 examples/dali_classifier.py
    python examples/dali_classifier.py --data-dir DIR   # your images: DIR/train/<class>/*.png|jpg, DIR/val/<class>/...

The pipeline takes ``shard_id`` and ``num_shards`` and hands them to its reader; the Trainer
fills them in with the global rank and the world size (docs/dali.md). The pipelines run on the
CPU (``device_id=None``), so the example needs no GPU; the batches are moved to the training
device by the Trainer.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer import DataModule, Trainer, TrainModule, seed_everything
from trainer.data.dali import DALILoader

try:
    from nvidia.dali import fn, pipeline_def, types
except ImportError as err:
    raise SystemExit("This example needs NVIDIA DALI: pip install 'lockstep-trainer[dali]'") from err

CLASSES = ("horizontal", "vertical", "checkerboard")


def write_images(root: Path, per_class: int, seed: int = 0) -> None:
    """Striped 16x16 grayscale PNGs with noise: root/<class>/<i>.png (classes in CLASSES)."""
    from torchvision.io import write_png

    g = torch.Generator().manual_seed(seed)
    grid = torch.arange(16)
    for label, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            period, phase = int(torch.randint(3, 6, (1,), generator=g)), int(torch.randint(0, 6, (1,), generator=g))
            rows = ((grid + phase) // period % 2)[:, None].expand(16, 16)
            pattern = [rows, rows.T, rows ^ rows.T][label]
            image = pattern.float() * 160 + 40 + 30 * torch.randn(16, 16, generator=g)
            write_png(image.clamp(0, 255).to(torch.uint8)[None], str(root / name / f"{i:04d}.png"))


@pipeline_def
def image_pipeline(file_root: str, shard_id: int, num_shards: int, training: bool) -> Any:
    """Files of this rank's shard -> decoded, (randomly mirrored,) normalized CHW images and labels."""
    encoded, labels = fn.readers.file(
        file_root=file_root,
        shard_id=shard_id,
        num_shards=num_shards,
        random_shuffle=training,
        pad_last_batch=True,  # every reader epoch ends on a batch boundary (DALILoader checks it)
        name="reader",
    )
    images = fn.decoders.image(encoded, device="cpu", output_type=types.GRAY)
    images = fn.crop_mirror_normalize(
        images,
        dtype=types.FLOAT,
        output_layout="CHW",
        mean=[127.5],
        std=[127.5],
        mirror=fn.random.coin_flip() if training else 0,
    )
    return images, fn.cast(fn.reshape(labels, shape=[]), dtype=types.INT64)


class ImageFolderData(DataModule):
    """DIR/train and DIR/val through DALI; ``prepare_data`` writes the synthetic images when DIR
    has none (once per node, the other ranks wait)."""

    def __init__(self, data_dir: str, batch_size: int = 16, num_threads: int = 1, per_class: int = 60) -> None:
        super().__init__()
        self.data_dir, self.batch_size, self.num_threads, self.per_class = Path(data_dir), batch_size, num_threads, per_class

    def prepare_data(self) -> None:
        if not (self.data_dir / "train").exists():
            write_images(self.data_dir / "train", self.per_class, seed=0)
            write_images(self.data_dir / "val", self.per_class // 3, seed=1)

    def _loader(self, split: str, training: bool) -> DALILoader:
        return DALILoader(
            image_pipeline,
            output_map=["image", "label"],
            file_root=str(self.data_dir / split),
            training=training,
            batch_size=self.batch_size,
            num_threads=self.num_threads,
            device_id=None,  # CPU operators only; a GPU pipeline takes device_id=self.trainer.local_rank
            seed=1234,
        )

    def train_dataloader(self) -> DALILoader:
        return self._loader("train", training=True)

    def val_dataloader(self) -> DALILoader:
        return self._loader("val", training=False)  # last_batch_policy "partial": each image once


class SmallCNN(TrainModule):
    def __init__(self, lr: float = 3e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Linear(16, len(CLASSES)),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = nn.functional.cross_entropy(self(batch["image"]), batch["label"])
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        logits = self(batch["image"])
        self.log("val_loss", nn.functional.cross_entropy(logits, batch["label"]), sync_dist=True)
        self.log("val_acc", (logits.argmax(1) == batch["label"]).float().mean(), prog_bar=True, sync_dist=True)

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams["lr"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", default="auto", help="processes on this machine (default: auto)")
    parser.add_argument("--accelerator", default="auto", help="cpu, cuda or auto")
    parser.add_argument("--max-epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=16, help="micro batch per process")
    parser.add_argument("--num-threads", type=int, default=1, help="DALI CPU threads per process")
    parser.add_argument("--data-dir", default=None, help="default: <root>/images (written when missing)")
    parser.add_argument("--root", default="dali_run", help="default_root_dir (logs, checkpoints)")
    parser.add_argument("--result-json", default=None, help="write the final metrics here (rank 0)")
    args = parser.parse_args(argv)

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    seed_everything(0)
    data = ImageFolderData(args.data_dir or os.path.join(args.root, "images"), args.batch_size, args.num_threads)
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=args.devices if args.devices == "auto" else int(args.devices),
        max_epochs=args.max_epochs,
        default_root_dir=args.root,
        log_every_n_steps=5,
        num_sanity_val_steps=0,
    )
    trainer.fit(SmallCNN(), datamodule=data)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    if trainer.is_global_zero:
        print(f"val_acc={metrics['val_acc']:.4f} world_size={trainer.world_size} "
              f"batches_per_epoch={trainer.num_training_batches} global_step={trainer.global_step}")
        if args.result_json:
            with open(args.result_json, "w") as f:
                json.dump({**metrics, "world_size": trainer.world_size, "global_step": trainer.global_step,
                           "batches_per_epoch": trainer.num_training_batches}, f)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
