"""Lightning's "boring" demo models and random datasets (``lightning.pytorch.demos.boring_classes``),
for bug reports and tests: the same names, layers, losses, optimizers and random draws as Lightning
2.6's, so a script seeded the same way trains to the same numbers under either framework.

Every dataset draws with ``torch.randn`` from the global generator: the map-style ones once, at
construction (``(length, size)``), the iterable ones one ``randn(size)`` per item as they are read.
"""
from __future__ import annotations

from typing import Any, Iterator, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset

from trainer.data.datamodule import DataModule
from trainer.module import TrainModule

_Item = TypeVar("_Item", covariant=True)


class _DrawnOnce(Dataset[_Item]):
    # Lightning's map-style random datasets are unrelated classes: a shared private base keeps
    # isinstance checks between them as false as there
    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __len__(self) -> int:
        return self.len


class RandomDataset(_DrawnOnce[Tensor]):
    """``length`` random vectors of ``size`` features, drawn once."""

    def __getitem__(self, index: int) -> Tensor:
        return self.data[index]


class RandomDictDataset(_DrawnOnce["dict[str, Tensor]"]):
    """``length`` random vectors ``x`` of ``size`` features, drawn once; items are ``{"a": x, "b": x + 2}``."""

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        a = self.data[index]
        return {"a": a, "b": a + 2}


class _DrawnOnRead(IterableDataset[Tensor]):
    def __init__(self, size: int, count: int) -> None:
        self.count = count
        self.size = size

    def __iter__(self) -> Iterator[Tensor]:
        return (torch.randn(self.size) for _ in range(self.count))


class RandomIterableDataset(_DrawnOnRead):
    """``count`` random vectors of ``size`` features, each drawn as it is read; no length."""


class RandomIterableDatasetWithLen(_DrawnOnRead):
    """``count`` random vectors of ``size`` features, each drawn as it is read; ``len()`` is ``count``."""

    def __len__(self) -> int:
        return self.count


class BoringModel(TrainModule):
    """One ``Linear(32, 2)`` pulled towards ones (MSE), SGD(lr=0.1) with a per-epoch StepLR; subclass and override."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(32, 2)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.layer(x)  # nn.Module.__call__ is typed Any: a Linear returns a Tensor
        return out

    def loss(self, preds: Tensor, labels: Tensor | None = None) -> Tensor:
        """MSE to ``labels``, ones if not given: any loss that moves the weights."""
        return F.mse_loss(preds, torch.ones_like(preds) if labels is None else labels)

    def step(self, batch: Any) -> Tensor:
        """The loss of one batch."""
        return self.loss(self(batch))

    def training_step(self, batch: Any, batch_idx: int) -> dict[str, Tensor]:
        return {"loss": self.step(batch)}

    def validation_step(self, batch: Any, batch_idx: int, *args: Any) -> dict[str, Tensor]:
        return {"x": self.step(batch)}

    def test_step(self, batch: Any, batch_idx: int, *args: Any) -> dict[str, Tensor]:
        return {"y": self.step(batch)}

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)]

    def train_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(RandomDataset(32, 64))

    def val_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(RandomDataset(32, 64))

    def test_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(RandomDataset(32, 64))

    def predict_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(RandomDataset(32, 64))


class ManualOptimBoringModel(BoringModel):
    """`BoringModel` under manual optimization: zero_grad, manual_backward, step in ``training_step``."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:  # type: ignore[override]
        optimizer = self.optimizers()
        loss = self.step(batch)
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss


class _OneLoaderPerStage(DataModule):
    # the loaders of both boring data modules: batches of one over what their setup made
    random_train: Dataset[Tensor]
    random_val: Dataset[Tensor]
    random_test: Dataset[Tensor]
    random_predict: Dataset[Tensor]

    def train_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(self.random_train)

    def val_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(self.random_val)

    def test_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(self.random_test)

    def predict_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(self.random_predict)


class BoringDataModule(_OneLoaderPerStage):
    """256 random vectors of 32 (drawn at construction), split in four consecutive quarters:
    train, val, test, predict (batches of one)."""

    def __init__(self) -> None:
        super().__init__()
        self.random_full = RandomDataset(32, 64 * 4)

    def setup(self, stage: str) -> None:
        quarter = {name: Subset(self.random_full, range(64 * i, 64 * (i + 1)))
                   for i, name in enumerate(("train", "val", "test", "predict"))}
        if stage == "fit":
            self.random_train = quarter["train"]
        if stage in ("fit", "validate"):
            self.random_val = quarter["val"]
        if stage in ("test", "predict"):
            setattr(self, f"random_{stage}", quarter[stage])


class BoringDataModuleNoLen(_OneLoaderPerStage):
    """`BoringDataModule`'s loaders over `RandomIterableDataset` (no length): 512, 128, 256 and 64 items."""

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self.random_train = RandomIterableDataset(32, 512)
        if stage in ("fit", "validate"):
            self.random_val = RandomIterableDataset(32, 128)
        if stage == "test":
            self.random_test = RandomIterableDataset(32, 256)
        if stage == "predict":
            self.random_predict = RandomIterableDataset(32, 64)


class IterableBoringDataModule(DataModule):
    """Each stage's loaders are a list of two: a `RandomDataset` and a `RandomIterableDataset` of 4 features."""

    _LENGTHS = {"train": 16, "val": 32, "test": 64, "predict": 128}
    train_datasets: list[Dataset[Tensor]]
    val_datasets: list[Dataset[Tensor]]
    test_datasets: list[Dataset[Tensor]]
    predict_datasets: list[Dataset[Tensor]]

    def setup(self, stage: str) -> None:
        def pair(name: str) -> list[Dataset[Tensor]]:
            return [RandomDataset(4, self._LENGTHS[name]), RandomIterableDataset(4, self._LENGTHS[name])]

        if stage == "fit":
            self.train_datasets = pair("train")
        if stage in ("fit", "validate"):
            self.val_datasets = pair("val")
        if stage in ("test", "predict"):
            setattr(self, f"{stage}_datasets", pair(stage))

    def train_dataloader(self) -> list[DataLoader[Tensor]]:
        return [DataLoader(d) for d in self.train_datasets]

    def val_dataloader(self) -> list[DataLoader[Tensor]]:
        return [DataLoader(d) for d in self.val_datasets]

    def test_dataloader(self) -> list[DataLoader[Tensor]]:
        return [DataLoader(d) for d in self.test_datasets]

    def predict_dataloader(self) -> list[DataLoader[Tensor]]:
        return [DataLoader(d) for d in self.predict_datasets]


class DemoModel(TrainModule):
    """``relu(Linear(32, out_dim))`` of the flattened batch; the loss is the output's sum; Adam."""

    def __init__(self, out_dim: int = 10, learning_rate: float = 0.02) -> None:
        super().__init__()
        self.l1 = nn.Linear(32, out_dim)
        self.learning_rate = learning_rate

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.l1(x.flatten(1)))

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        out: Tensor = self(batch)  # nn.Module.__call__ is typed Any: forward returns a Tensor
        return out.sum()

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)


class Net(nn.Module):
    """PyTorch's MNIST example network: two 3x3 convolutions, max-pool, two linear layers, log-softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = F.relu(self.fc1(torch.flatten(self.dropout1(x), 1)))
        return F.log_softmax(self.fc2(self.dropout2(x)), dim=1)
