"""`trainer.lightning.demos.mnist_datamodule` against Lightning's, offline: the files laid out as each download
leaves them (Lightning's hosted ``<root>/MNIST/complete/*.pt``, torchvision's ``<root>/MNIST/raw``)
give the same items, split and batches; the hosted copy's download runs against a real HTTP server
on this machine (a thread), and torchvision's fails the same way on both frameworks."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest
import torch

from tests.helpers.demos_parity import demos
from tests.helpers.optional import importorskip

importorskip("lightning", reason="the comparison needs `lightning` (the dev extra)")

SIZES = {"training": 120, "test": 40}


def _images(split: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(len(split))
    n = SIZES[split]
    return torch.randint(0, 256, (n, 28, 28), generator=g, dtype=torch.uint8), torch.randint(0, 10, (n,), generator=g)


def lay_out_hosted(folder: Path) -> None:
    """Lightning's hosted MNIST as its download leaves it: ``(images, labels)`` in two ``.pt`` files."""
    folder.mkdir(parents=True, exist_ok=True)
    for split in SIZES:
        torch.save(_images(split), folder / f"{split}.pt")


def lay_out_torchvision(root: Path) -> None:
    """torchvision's MNIST as its download leaves it: four IDX files under ``<root>/MNIST/raw``."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for split, prefix in (("training", "train"), ("test", "t10k")):
        images, labels = _images(split)
        n = len(labels)
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">iiii", 2051, n, 28, 28) + images.numpy().tobytes())
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">ii", 2049, n) + labels.to(torch.uint8).numpy().tobytes())


def _same_items(theirs, ours, indices=range(0, 40, 7)) -> None:
    assert len(theirs) == len(ours)
    for i in indices:
        (a, la), (b, lb) = theirs[i], ours[i]
        assert torch.equal(a, b) and la == lb and type(la) is type(lb)


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("normalize", [(0.1307, 0.3081), None, (0.5, 2.0)])
def test_the_hosted_mnist_gives_lightning_s_items(train, normalize):
    lay_out_hosted(Path("data/MNIST/complete"))
    theirs, ours = (demos(f).mnist_datamodule._MNIST("data", train=train, normalize=normalize, download=False)
                    for f in ("lightning", "lockstep"))
    _same_items(theirs, ours)
    assert len(ours) == SIZES["training" if train else "test"]
    image, label = ours[3]
    assert image.shape == (1, 28, 28) and image.dtype == torch.float32 and isinstance(label, int)


def test_the_hosted_mnist_without_its_files_raises_as_lightning_s():
    for framework in ("lightning", "lockstep"):
        with pytest.raises(RuntimeError, match="Dataset not found"):
            demos(framework).mnist_datamodule._MNIST("nowhere", download=False)


@pytest.mark.timeout(60)
def test_the_hosted_mnist_downloads_its_two_files(server, monkeypatch):
    ours = demos("lockstep").mnist_datamodule._MNIST
    served, url = server
    lay_out_hosted(served)
    monkeypatch.setattr(ours, "RESOURCES", tuple(f"{url}/{Path(u).name}" for u in ours.RESOURCES))
    downloaded = ours("fetched", train=False)
    assert sorted(p.name for p in Path("fetched/MNIST/complete").iterdir()) == ["test.pt", "training.pt"]
    lay_out_hosted(Path("data/MNIST/complete"))
    _same_items(demos("lightning").mnist_datamodule._MNIST("data", train=False, download=False), downloaded)


@pytest.mark.timeout(60)
def test_the_hosted_mnist_download_error_reaches_the_caller(server, monkeypatch):
    import urllib.error

    ours = demos("lockstep").mnist_datamodule._MNIST
    _, url = server  # serves nothing: every file is a 404
    monkeypatch.setattr(ours, "RESOURCES", (f"{url}/training.pt", f"{url}/test.pt"))
    with pytest.raises(urllib.error.HTTPError):
        ours("fetched")


def test_mnist_is_the_hosted_copy_when_mocked(monkeypatch, capsys):
    monkeypatch.setenv("PL_USE_MOCKED_MNIST", "1")
    lay_out_hosted(Path("data/MNIST/complete"))
    theirs, ours = (demos(f).mnist_datamodule.MNIST("data", train=True, download=False) for f in ("lightning", "lockstep"))
    assert type(ours) is demos("lockstep").mnist_datamodule._MNIST
    _same_items(theirs, ours)
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["`torchvision.datasets.MNIST` not available. Using our hosted version"] * 2


def test_mnist_is_torchvision_s_when_its_files_are_there():
    from torchvision import transforms
    from torchvision.datasets import MNIST as TorchvisionMNIST

    lay_out_torchvision(Path("data"))  # MNIST() checks ./data first, whatever root it is given
    lay_out_torchvision(Path("elsewhere"))
    theirs, ours = (demos(f).mnist_datamodule.MNIST("elsewhere", train=False, transform=transforms.ToTensor())
                    for f in ("lightning", "lockstep"))
    assert type(ours) is TorchvisionMNIST
    _same_items(theirs, ours)


@pytest.mark.timeout(120)
def test_mnist_offline_fails_as_lightning_s(server, monkeypatch):
    from torchvision.datasets import MNIST as TorchvisionMNIST

    _, url = server  # torchvision's mirrors answer 404, as no mirror answers offline
    monkeypatch.setattr(TorchvisionMNIST, "mirrors", [f"{url}/"])
    for framework in ("lightning", "lockstep"):
        with pytest.raises(RuntimeError, match="Error downloading train-images-idx3-ubyte.gz"):
            demos(framework).mnist_datamodule.MNIST("data", train=True)


@pytest.mark.parametrize("normalize", [False, True])
def test_the_datamodule_splits_and_batches_as_lightning_s(normalize):
    lay_out_torchvision(Path("data"))
    batches = {}
    for framework in ("lightning", "lockstep"):
        dm = demos(framework).mnist_datamodule.MNISTDataModule(val_split=24, num_workers=0, normalize=normalize,
                                                               batch_size=16)
        dm.prepare_data()
        dm.setup("fit")
        torch.manual_seed(0)  # the training loader shuffles from the global generator
        loaders = (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader())
        batches[framework] = ([list(loader) for loader in loaders], dm.dataset_val.indices, dm.num_classes, dm.name)
        assert [len(loader) for loader in loaders] == [96 // 16, 24 // 16, 40 // 16]  # the last partial batch dropped
    theirs, ours = batches["lightning"], batches["lockstep"]
    assert theirs[1:] == ours[1:]
    for t_loader, o_loader in zip(theirs[0], ours[0]):
        for (tx, ty), (ox, oy) in zip(t_loader, o_loader, strict=True):
            assert torch.equal(tx, ox) and torch.equal(ty, oy)
    assert float(ours[0][0][0][0].min()) < 0 if normalize else float(ours[0][0][0][0].min()) >= 0


def test_the_datamodule_s_defaults_are_lightning_s():
    import inspect

    theirs, ours = (demos(f).mnist_datamodule.MNISTDataModule for f in ("lightning", "lockstep"))
    def defaults(cls):
        return [(p.name, p.default) for p in inspect.signature(cls).parameters.values()]

    assert defaults(theirs) == defaults(ours)
    assert vars(theirs()).keys() >= vars(ours()).keys() >= {"data_dir", "val_split", "num_workers", "normalize", "seed", "batch_size"}
