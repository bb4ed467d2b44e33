"""Lightning's demo MNIST (``lightning.pytorch.demos.mnist_datamodule``): `MNIST`, which downloads
torchvision's MNIST or, failing that, Lightning's hosted copy (`_MNIST`), and `MNISTDataModule`,
its train/val/test splits, with Lightning 2.6's defaults, split and loaders.

The download needs the internet. Offline, lay the files out as a finished download leaves them:
torchvision's ``<root>/MNIST/raw/`` files, or, with ``PL_USE_MOCKED_MNIST`` set (any non-empty
value), Lightning's ``<root>/MNIST/complete/training.pt`` and ``test.pt``, each a
``torch.save((images uint8 [N, 28, 28], labels int64 [N]))``.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import random
import sys
import time
import urllib.request
import warnings
from types import ModuleType
from typing import Any, Callable
from urllib.error import HTTPError

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, random_split

from trainer.data.datamodule import DataModule

_DATASETS_PATH = "./data"
_log = logging.getLogger(__name__)


def _import_torchvision(name: str) -> ModuleType:
    """``import <name>`` (torchvision or one of its modules). A torchvision that is installed but
    cannot be imported (a CUDA build beside a CPU-only torch) raises RuntimeError or OSError from
    deep inside it; that becomes an ImportError that says so in one line."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise
    except Exception as error:  # noqa: BLE001 - whatever the mismatched build raises
        first_line = (str(error).splitlines() or [""])[0]
        raise ImportError(
            f"torchvision is installed but cannot be imported ({type(error).__name__}: {first_line}): "
            f"install the torchvision build that matches torch {torch.__version__}") from error


class _MNIST(Dataset["tuple[Tensor, int]"]):
    """Lightning's hosted MNIST: ``(image [1, 28, 28] float, label)`` items, the image normalized as
    ``(pixel - mean) / std`` on the 0..255 scale (``normalize=(mean, std)``; None: raw pixels).

    A torchvision-style ``transform`` argument is accepted and ignored, as Lightning's copy ignores it.
    """

    RESOURCES = (
        "https://pl-public-data.s3.amazonaws.com/MNIST/processed/training.pt",
        "https://pl-public-data.s3.amazonaws.com/MNIST/processed/test.pt",
    )
    TRAIN_FILE_NAME = "training.pt"
    TEST_FILE_NAME = "test.pt"
    cache_folder_name = "complete"

    def __init__(self, root: str, train: bool = True, normalize: tuple[float, ...] | None = (0.1307, 0.3081),
                 download: bool = True, **kwargs: Any) -> None:
        super().__init__()
        self.root = root
        self.train = train
        self.normalize = normalize
        self.prepare_data(download)
        name = self.TRAIN_FILE_NAME if train else self.TEST_FILE_NAME
        self.data, self.targets = self._try_load(os.path.join(self.cached_folder_path, name))

    @property
    def cached_folder_path(self) -> str:
        """Where the two ``.pt`` files are: ``<root>/MNIST/complete``."""
        return os.path.join(self.root, "MNIST", self.cache_folder_name)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, idx: int) -> tuple[Tensor, int]:
        image = self.data[idx].float().unsqueeze(0)
        if self.normalize is not None and len(self.normalize) == 2:
            image = self.normalize_tensor(image, *self.normalize)
        return image, int(self.targets[idx])

    def _check_exists(self, data_folder: str) -> bool:
        return all(os.path.isfile(os.path.join(data_folder, f)) for f in (self.TRAIN_FILE_NAME, self.TEST_FILE_NAME))

    def prepare_data(self, download: bool = True) -> None:
        """Download both files unless they are there; raise `RuntimeError` if they are not there after."""
        if download and not self._check_exists(self.cached_folder_path):
            self._download(self.cached_folder_path)
        if not self._check_exists(self.cached_folder_path):
            raise RuntimeError("Dataset not found.")

    def _download(self, data_folder: str) -> None:
        os.makedirs(data_folder, exist_ok=True)
        for url in self.RESOURCES:
            _log.info("Downloading %s", url)
            urllib.request.urlretrieve(url, os.path.join(data_folder, os.path.basename(url)))  # noqa: S310

    @staticmethod
    def _try_load(path: str, trials: int = 30, delta: float = 1.0) -> tuple[Tensor, Tensor]:
        # several processes may be writing the file at once: retry after a random pause
        if not os.path.isfile(path):
            raise FileNotFoundError(f"missing file: {path}")
        for trial in range(trials):
            try:
                data, targets = torch.load(path)
                return data, targets
            except Exception:
                if trial == trials - 1:
                    raise
                time.sleep(delta * random.random())  # noqa: S311
        raise ValueError(f"trials must be at least 1, not {trials}")

    @staticmethod
    def normalize_tensor(tensor: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
        """``(tensor - mean) / std``."""
        return tensor.sub(torch.as_tensor(mean, dtype=tensor.dtype, device=tensor.device)).div(
            torch.as_tensor(std, dtype=tensor.dtype, device=tensor.device))


def MNIST(*args: Any, **kwargs: Any) -> Dataset[tuple[Any, int]]:  # noqa: N802  (Lightning's name: a function standing for a class)
    """``torchvision.datasets.MNIST(*args, **kwargs)``, after downloading it into ``./data``; if that
    download answers an HTTP error, or ``PL_USE_MOCKED_MNIST`` is set, Lightning's hosted `_MNIST`."""
    dataset_class: Callable[..., Dataset[tuple[Any, int]]] = _MNIST
    if not os.getenv("PL_USE_MOCKED_MNIST"):
        torchvision_mnist = _import_torchvision("torchvision.datasets").MNIST
        try:
            torchvision_mnist(_DATASETS_PATH, download=True)
            dataset_class = torchvision_mnist
        except HTTPError as error:
            print(f"Error {error} downloading `torchvision.datasets.MNIST`")
    if dataset_class is _MNIST:
        print("`torchvision.datasets.MNIST` not available. Using our hosted version")
    return dataset_class(*args, **kwargs)


class MNISTDataModule(DataModule):
    """MNIST in batches: ``train`` minus ``val_split`` images (a split seeded with 42) to train, those to
    validate, ``test`` to test; the training loader shuffles, all drop their last partial batch.

    ``normalize`` maps pixels to [-1, 1] (with torchvision; without it items are what `MNIST` gives).
    ``seed`` is kept as an attribute, as Lightning keeps it; the split's seed is 42 either way.
    """

    name = "mnist"

    def __init__(self, data_dir: str = _DATASETS_PATH, val_split: int = 5000, num_workers: int = 16,
                 normalize: bool = False, seed: int = 42, batch_size: int = 32) -> None:
        super().__init__()
        if num_workers and sys.platform == "win32":
            warnings.warn(f"You have requested num_workers={num_workers} on Windows,"
                          " but currently recommended is 0, so we set it for you")
            num_workers = 0
        self.data_dir = data_dir
        self.val_split = val_split
        self.num_workers = num_workers
        self.normalize = normalize
        self.seed = seed
        self.batch_size = batch_size

    @property
    def num_classes(self) -> int:
        """10."""
        return 10

    def prepare_data(self) -> None:
        """Download both splits into ``data_dir``."""
        MNIST(self.data_dir, train=True, download=True)
        MNIST(self.data_dir, train=False, download=True)

    def setup(self, stage: str) -> None:
        dataset = MNIST(self.data_dir, train=True, download=False, **self._transform())
        sizes = [len(dataset) - self.val_split, self.val_split]  # type: ignore[arg-type]
        self.dataset_train, self.dataset_val = random_split(dataset, sizes, generator=torch.Generator().manual_seed(42))

    def train_dataloader(self) -> DataLoader[tuple[Any, int]]:
        return self._loader(self.dataset_train, shuffle=True)

    def val_dataloader(self) -> DataLoader[tuple[Any, int]]:
        return self._loader(self.dataset_val, shuffle=False)

    def test_dataloader(self) -> DataLoader[tuple[Any, int]]:
        return self._loader(MNIST(self.data_dir, train=False, download=False, **self._transform()), shuffle=False)

    @property
    def default_transforms(self) -> Callable[..., Any] | None:
        """``ToTensor()`` (then ``Normalize((0.5,), (0.5,))`` if ``normalize``); None without torchvision."""
        if importlib.util.find_spec("torchvision") is None:
            return None
        transforms = _import_torchvision("torchvision.transforms")
        # the module is imported by name (typed ModuleType): its transforms are callables
        transform: Callable[..., Any]
        if not self.normalize:
            transform = transforms.ToTensor()
        else:
            transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize(mean=(0.5,), std=(0.5,))])
        return transform

    def _transform(self) -> dict[str, Any]:
        transform = self.default_transforms
        return {"transform": transform} if transform else {}

    def _loader(self, dataset: Dataset[tuple[Any, int]], shuffle: bool) -> DataLoader[tuple[Any, int]]:
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=shuffle, num_workers=self.num_workers,
                          drop_last=True, pin_memory=True)
