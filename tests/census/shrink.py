"""Harness-side shrinking: patches applied in the run's process before a vendored script starts.

Each names what it changes; none edits a vendored file. `apply(names)` runs the named ones (a
project's ``shrink``) and always `_no_worker_processes` (two frameworks side by side on a small
machine: data-loading workers would only cost time, and both sides read the same items either way).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from tests.census.fake_data import (FakeImages, FakeLibriMix, install_torchvision, write_decathlon_spleen,
                                    write_oxford_pet)


def _no_worker_processes() -> None:
    import torch.utils.data

    original = torch.utils.data.DataLoader.__init__

    # the loader's own signature stays visible: Lightning re-creates a loader from the arguments it
    # records by name (predict, a sampler injected)
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["num_workers"] = 0
        kwargs.pop("persistent_workers", None)
        kwargs.pop("prefetch_factor", None)
        original(self, *args, **kwargs)

    torch.utils.data.DataLoader.__init__ = __init__  # type: ignore[method-assign]


def _optuna_two_seeded_trials() -> None:
    """``study.optimize(n_trials=100, timeout=600)`` -> 2 trials, sampled by a seeded sampler."""
    import optuna

    create_study, optimize = optuna.create_study, optuna.study.Study.optimize

    def seeded_create_study(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("sampler", optuna.samplers.RandomSampler(seed=0))
        return create_study(*args, **kwargs)

    def two_trials(self: Any, func: Any, n_trials: int | None = None, timeout: float | None = None, **kwargs: Any) -> None:
        optimize(self, func, n_trials=2, timeout=None, **kwargs)

    optuna.create_study = seeded_create_study
    optuna.study.Study.optimize = two_trials  # type: ignore[method-assign]


def _batches_of_8() -> None:
    """Every DataLoader's ``batch_size`` at most 8 (ResNet-18 pairs of views at 256 a batch take minutes on a CPU)."""
    import torch.utils.data

    original = torch.utils.data.DataLoader.__init__

    @functools.wraps(original)
    def __init__(self: Any, dataset: Any, batch_size: int | None = 1, *args: Any, **kwargs: Any) -> None:
        original(self, dataset, None if batch_size is None else min(batch_size, 8), *args, **kwargs)

    torch.utils.data.DataLoader.__init__ = __init__  # type: ignore[method-assign]


def _lightning_demos_mnist() -> None:
    """The demo MNIST (it downloads) -> the offline stand-in: Lightning's, or under Lockstep, Lockstep's
    (the script's ``lightning.pytorch.demos`` reads from it)."""
    import importlib
    import sys

    lockstep = any(getattr(finder, "_lockstep_alias", False) for finder in sys.meta_path)
    demo = importlib.import_module("trainer.lightning.demos.mnist_datamodule" if lockstep else "lightning.pytorch.demos.mnist_datamodule")
    demo.MNIST = FakeImages  # type: ignore[attr-defined]


def _wikitext2_local() -> None:
    """The demo WikiText2's file (it downloads) laid out where the demo looks, ``./data/wikitext-2.txt``:
    5,000 lines of 30 words over a 2,000-word vocabulary, the same in every run (the demo reads a
    file already there and fetches nothing)."""
    import random
    from pathlib import Path

    rng = random.Random(0)
    words = [f"w{i}" for i in range(2000)]
    Path("data").mkdir(exist_ok=True)
    lines = (" ".join(rng.choice(words) for _ in range(30)) for _ in range(5000))
    Path("data/wikitext-2.txt").write_text("\n".join(lines) + "\n", encoding="utf8")


def _pandas_setting_with_copy_warning() -> None:
    """``pandas.errors.SettingWithCopyWarning``, which pandas 3 removed (copy-on-write made it
    moot): the name a script written for pandas 2 imports and turns into an error; nothing raises it."""
    import pandas.errors

    if not hasattr(pandas.errors, "SettingWithCopyWarning"):
        pandas.errors.SettingWithCopyWarning = type("SettingWithCopyWarning", (Warning,), {})  # type: ignore[attr-defined]


def _pytorch_lightning_only() -> None:
    """An environment with ``pytorch_lightning`` and not the ``lightning`` package, the one a script
    written for ``pytorch_lightning`` is run in: a library that prefers ``lightning.pytorch`` (PyG's
    `LightningDataset`) then takes ``pytorch_lightning`` too. Under the runner both names are Lockstep's."""
    import sys

    sys.modules["lightning"] = None  # type: ignore[assignment]  # `import lightning...` raises ImportError


def _pyg_tudataset() -> None:
    """PyG's ``TUDataset`` (it downloads) -> 200 small random graphs of 2 classes, the pre_transform applied."""
    import torch
    import torch_geometric.datasets
    from torch_geometric.data import Data, InMemoryDataset

    class TUDataset(InMemoryDataset):
        def __init__(self, root: str, name: str, pre_transform: Any = None, **kwargs: Any) -> None:
            super().__init__(None)
            g = torch.Generator().manual_seed(0)
            graphs = []
            for i in range(200):
                n = int(torch.randint(5, 15, (1,), generator=g))
                edges = torch.randint(0, n, (2, 3 * n), generator=g)
                graph = Data(edge_index=torch.cat([edges, edges.flip(0)], 1), y=torch.tensor([i % 2]), num_nodes=n)
                graphs.append(pre_transform(graph) if pre_transform is not None else graph)
            self.data, self.slices = self.collate(graphs)

    torch_geometric.datasets.TUDataset = TUDataset  # type: ignore[misc]


def _offline_downloads() -> None:
    """``urllib.request.urlretrieve`` answers HTTP 503 at once: the machine is offline, and the notebooks
    catch that error (and train instead of loading a pretrained file)."""
    import urllib.error
    import urllib.request

    def unavailable(url: str, *args: Any, **kwargs: Any) -> Any:
        raise urllib.error.HTTPError(url, 503, "offline (census)", None, None)  # type: ignore[arg-type]

    urllib.request.urlretrieve = unavailable  # type: ignore[assignment]


def _cart_pole_gym() -> None:
    """A ``gym`` module (not installed here) whose ``make`` gives the cart-pole of tests/port's DQN example."""
    import sys
    import types

    from tests.port.lightning_examples.dqn import CartPole

    gym = types.ModuleType("gym")
    gym.Env = CartPole  # type: ignore[attr-defined]
    gym.make = lambda name, **kwargs: CartPole()  # type: ignore[attr-defined]
    sys.modules["gym"] = gym


_IMAGENET_PREPROCESSING = {"input_space": "RGB", "input_range": [0, 1], "mean": [0.485, 0.456, 0.406],
                           "std": [0.229, 0.224, 0.225]}


def _without_weights(get_encoder: Callable[..., Any]) -> Callable[..., Any]:
    def randomly_initialized(name: str, *args: Any, weights: Any = None, **kwargs: Any) -> Any:
        return get_encoder(name, *args, **kwargs)

    return randomly_initialized


def _smp_offline() -> None:
    """segmentation_models_pytorch offline: ``OxfordPetDataset.download`` writes the small stand-in
    tree (`write_oxford_pet`) instead of fetching 800 MB, and every model's encoder starts from its
    own (seeded) initialization instead of ImageNet weights from the Hugging Face Hub, with the
    ImageNet mean and std the weights' Hub config gives as their preprocessing parameters."""
    import importlib
    import pkgutil

    import segmentation_models_pytorch.datasets.oxford_pet as oxford_pet
    import segmentation_models_pytorch.decoders as decoders
    import segmentation_models_pytorch.encoders as encoders

    oxford_pet.OxfordPetDataset.download = staticmethod(write_oxford_pet)  # type: ignore[method-assign]
    encoders.get_preprocessing_params = lambda name, pretrained="imagenet": dict(_IMAGENET_PREPROCESSING)
    for info in pkgutil.iter_modules(decoders.__path__):
        model = importlib.import_module(f"{decoders.__name__}.{info.name}.model")
        # each decoder module imported `get_encoder` by name: the patch goes where it is called
        if hasattr(model, "get_encoder"):
            model.get_encoder = _without_weights(model.get_encoder)


def _monai_offline() -> None:
    """MONAI's ``download_and_extract`` (the 1.5 GB Decathlon archive) writes the small stand-in
    spleen tree (`write_decathlon_spleen`) into its output folder instead."""
    import monai.apps

    def write_instead(url: str, filepath: str = "", output_dir: str = ".", *args: Any, **kwargs: Any) -> None:
        write_decathlon_spleen(output_dir)

    monai.apps.download_and_extract = write_instead


def _torchaudio_librimix() -> None:
    """torchaudio's ``LibriMix`` (LibriSpeech mixtures, built from 60 GB) -> the offline stand-in."""
    import torchaudio.datasets

    torchaudio.datasets.LibriMix = FakeLibriMix  # type: ignore[misc,assignment]


SHRINKS: dict[str, Callable[[], None]] = {
    "torchvision": install_torchvision,
    "optuna": _optuna_two_seeded_trials,
    "batches_of_8": _batches_of_8,
    "lightning_demos_mnist": _lightning_demos_mnist,
    "wikitext2_local": _wikitext2_local,
    "pytorch_lightning_only": _pytorch_lightning_only,
    "pandas_2_names": _pandas_setting_with_copy_warning,
    "pyg_tudataset": _pyg_tudataset,
    "offline_downloads": _offline_downloads,
    "cart_pole_gym": _cart_pole_gym,
    "smp_offline": _smp_offline,
    "monai_offline": _monai_offline,
    "torchaudio_librimix": _torchaudio_librimix,
}


def apply(names: tuple[str, ...]) -> None:
    """Run the shrinks ``names`` (keys of `SHRINKS`), after the data loaders' worker patch."""
    _no_worker_processes()
    for name in names:
        SHRINKS[name]()
