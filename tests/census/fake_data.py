"""Offline stand-ins for the datasets census projects download, installed from the harness side.

Each has its real dataset's constructor, length and item type (a PIL image and an int label), with
images made from their index on demand, so a 60,000-image split costs nothing until a batch is read;
the Trainer's ``limit_*_batches`` keep the reads few. The vendored scripts stay byte for byte.
A dataset read from files (the Oxford-IIIT Pet tree, the Decathlon's spleen CT volumes) is written
instead, small, in its real layout.
"""
from __future__ import annotations

from typing import Any, Callable

import os

import numpy as np
from PIL import Image
from torch.utils.data import Dataset


class FakeImages(Dataset):
    """A torchvision-style image dataset: ``(PIL image, label)`` items made from their index."""

    sizes = (60_000, 10_000)  # train, test
    shape: tuple[int, ...] = (28, 28)
    num_classes = 10

    def __init__(self, root: Any = ".", train: bool = True, transform: Callable[..., Any] | None = None,
                 target_transform: Callable[..., Any] | None = None, download: bool = False, **_: Any) -> None:
        self.root, self.train = root, train
        self.transform, self.target_transform = transform, target_transform
        self.classes = [str(c) for c in range(self.num_classes)]
        self.targets = [i % self.num_classes for i in range(len(self))]

    def __len__(self) -> int:
        return self.sizes[0 if self.train else 1]

    def image(self, index: int) -> Image.Image:
        """The index's image, the same in every process."""
        rng = np.random.default_rng(index + (0 if self.train else 10_000_000))
        return Image.fromarray(rng.integers(0, 256, self.shape, dtype=np.uint8))

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        image, target = self.image(index), self.targets[index]
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target


class FakeCIFAR10(FakeImages):
    """CIFAR10's sizes: 50,000 / 10,000 RGB 32x32 images; ``data`` holds them all (N, 32, 32, 3), as CIFAR10's."""

    sizes = (50_000, 10_000)
    shape = (32, 32, 3)

    @property
    def data(self) -> np.ndarray:
        """Every image as one uint8 array, made on first read (a notebook computes the mean and std from it)."""
        if not hasattr(self, "_data"):
            self._data = np.stack([np.asarray(self.image(i)) for i in range(len(self))])
        return self._data


def install_torchvision() -> None:
    """Replace torchvision's downloading datasets with the stand-ins, before the script imports them."""
    import torchvision.datasets as datasets
    import torchvision.datasets.mnist as mnist

    for module in (datasets, mnist):
        module.MNIST = FakeImages  # type: ignore[attr-defined]
        module.FashionMNIST = type("FashionMNIST", (FakeImages,), {})  # type: ignore[attr-defined]
    datasets.CIFAR10 = FakeCIFAR10  # type: ignore[attr-defined]



def write_oxford_pet(root: str, trainval: int = 60, test: int = 20) -> None:
    """The Oxford-IIIT Pet tree its ``download`` unpacks under ``root``, small: ``images/*.jpg`` (RGB),
    ``annotations/trimaps/*.png`` (1 pet, 2 background, 3 border: a pet-shaped ellipse in each image)
    and the ``trainval.txt`` / ``test.txt`` split lists, each image made from its index."""
    images, trimaps = os.path.join(root, "images"), os.path.join(root, "annotations", "trimaps")
    os.makedirs(images, exist_ok=True)
    os.makedirs(trimaps, exist_ok=True)
    names = [f"pet_{i:04d}" for i in range(trainval + test)]
    for index, name in enumerate(names):
        rng = np.random.default_rng(index)
        height, width = int(rng.integers(72, 120)), int(rng.integers(72, 120))
        rows, cols = np.ogrid[:height, :width]
        cy, cx, ry, rx = height * rng.uniform(0.3, 0.7), width * rng.uniform(0.3, 0.7), height / 4, width / 4
        inside = ((rows - cy) / ry) ** 2 + ((cols - cx) / rx) ** 2
        trimap = np.where(inside <= 0.8, 1, np.where(inside <= 1.2, 3, 2)).astype(np.uint8)
        pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        pixels[trimap == 1] //= 2  # the pet darker than its background: something to learn
        Image.fromarray(pixels).save(os.path.join(images, f"{name}.jpg"))
        Image.fromarray(trimap).save(os.path.join(trimaps, f"{name}.png"))
    for split, chosen in (("trainval", names[:trainval]), ("test", names[trainval:])):
        with open(os.path.join(root, "annotations", f"{split}.txt"), "w") as listing:
            listing.write("".join(f"{name} {i % 37 + 1} 1 1\n" for i, name in enumerate(chosen)))


def write_decathlon_spleen(output_dir: str, volumes: int = 17, size: int = 96) -> None:
    """The Medical Segmentation Decathlon's ``Task09_Spleen`` tree its archive unpacks into ``output_dir``,
    small: ``imagesTr/*.nii.gz`` (CT in Hounsfield units, 1.5 x 1.5 x 2 mm voxels, the spacing the
    tutorial resamples to) and ``labelsTr/*.nii.gz`` (an ellipsoid "spleen", brighter than around it)."""
    import nibabel

    task = os.path.join(output_dir, "Task09_Spleen")
    affine = np.diag([1.5, 1.5, 2.0, 1.0])
    for folder in ("imagesTr", "labelsTr"):
        os.makedirs(os.path.join(task, folder), exist_ok=True)
    grid = np.ogrid[:size, :size, :size]
    for index in range(volumes):
        rng = np.random.default_rng(index)
        centre, radius = rng.uniform(0.35, 0.65, 3) * size, rng.uniform(0.12, 0.2, 3) * size
        label = (sum(((axis - c) / r) ** 2 for axis, c, r in zip(grid, centre, radius)) <= 1).astype(np.uint8)
        # above the tutorial's window floor (-57 HU) everywhere: its foreground crop keeps the whole volume
        image = rng.integers(-40, 120, (size, size, size)).astype(np.int16) + 60 * label
        name = f"spleen_{index}.nii.gz"
        nibabel.save(nibabel.Nifti1Image(image, affine), os.path.join(task, "imagesTr", name))
        nibabel.save(nibabel.Nifti1Image(label, affine), os.path.join(task, "labelsTr", name))


class FakeLibriMix(Dataset):
    """torchaudio's ``LibriMix``: ``(sample_rate, mixture, [sources])`` items, each source a few seconds of
    harmonic tones under a syllable-like envelope, the mixture their sum, made from the index on demand."""

    sizes = {"train-360": 50_800, "train-100": 13_900, "dev": 3_000, "test": 3_000}

    def __init__(self, root: Any = ".", subset: str = "train-360", num_speakers: int = 2, sample_rate: int = 8000,
                 task: str = "sep_clean", mode: str = "min") -> None:
        self.subset, self.num_speakers, self.sample_rate = subset, num_speakers, sample_rate

    def __len__(self) -> int:
        return self.sizes[self.subset]

    def _source(self, rng: np.random.Generator, frames: int) -> np.ndarray:
        time = np.arange(frames) / self.sample_rate
        pitch = rng.uniform(90, 260)
        tone = sum(np.sin(2 * np.pi * pitch * k * time + rng.uniform(0, 2 * np.pi)) / k for k in range(1, 6))
        envelope = np.clip(np.sin(2 * np.pi * rng.uniform(2, 5) * time + rng.uniform(0, 2 * np.pi)), 0, None)
        return (0.1 * tone * envelope).astype(np.float32)

    def __getitem__(self, index: int) -> tuple[int, Any, list[Any]]:
        import torch

        rng = np.random.default_rng([index, list(self.sizes).index(self.subset)])
        frames = int(rng.uniform(2.5, 4.5) * self.sample_rate)
        sources = [torch.from_numpy(self._source(rng, frames))[None] for _ in range(self.num_speakers)]
        return self.sample_rate, sum(sources), sources
