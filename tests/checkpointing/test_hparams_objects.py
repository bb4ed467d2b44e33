"""Object-valued hyperparameters as Lightning gives them back (differential).

``save_hyperparameters()`` of an ``__init__`` taking objects (a library's settings object, a
``torch.nn.Module``): ``load_from_checkpoint(path, weights_only=False)``, the caller trusting the
file, rebuilds them as Lightning's own ``load_from_checkpoint`` does. With ``weights_only=True``
nothing in the file is unpickled, and the refusal names the hyperparameters and how to load them.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.hparams_objects import Scaler
from tests.helpers.optional import importorskip
import trainer as lockstep
from trainer.checkpoint_io.file_format import CheckpointError

pl = importorskip("lightning.pytorch", reason="Lightning 2.x (the `dev` extra)")
QUIET = {"accelerator": "cpu", "logger": False, "enable_progress_bar": False, "enable_model_summary": False,
         "enable_checkpointing": False}


def _module_class(framework: Any) -> Any:
    class WithObjects(framework.LightningModule):
        def __init__(self, scaler: Scaler, encoder: nn.Module, width: int = 2) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.scaler, self.encoder = scaler, encoder
            self.head = nn.Linear(4, width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(torch.tanh(self.encoder((x - self.scaler.center) / self.scaler.scale)))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return WithObjects


def _written(framework: Any, path: Path) -> Path:
    torch.manual_seed(0)
    module = _module_class(framework)(Scaler(0.5, 2.0, ("a", "b")), nn.Linear(3, 4), width=2)
    t = framework.Trainer(max_steps=2, **QUIET)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice to leave the nn.Module out of the hyperparameters
        t.fit(module, DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=4))
    t.save_checkpoint(path)
    return path


def _loaded(framework: Any, path: Path) -> tuple[Scaler, list[torch.Tensor], int, torch.Tensor]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = _module_class(framework).load_from_checkpoint(path, weights_only=False)
    encoder = module.hparams["encoder"]
    assert encoder is module.encoder  # the module the hyperparameter names is the one that runs
    x = torch.linspace(-1, 1, 6).reshape(2, 3)
    return module.scaler, [p.detach() for p in encoder.parameters()], module.hparams["width"], module(x).detach()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("hparams_objects")
    return {name: _written(framework, directory / f"{name}.ckpt") for name, framework in (("lightning", pl), ("lockstep", lockstep))}


def test_weights_only_false_rebuilds_the_objects_as_lightning_does(files):
    theirs = _loaded(pl, files["lightning"])
    assert theirs[0] == Scaler(0.5, 2.0, ("a", "b"))
    for ours in (_loaded(lockstep, files["lockstep"]), _loaded(lockstep, files["lightning"])):
        assert type(ours[0]) is Scaler and ours[0] == theirs[0]
        assert ours[2] == theirs[2]
        for got, want in zip(ours[1], theirs[1]):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
        torch.testing.assert_close(ours[3], theirs[3], rtol=0, atol=1e-5)


def test_a_lockstep_file_with_objects_still_loads_with_torch_weights_only(files):
    saved = torch.load(files["lockstep"], weights_only=True)
    assert saved["hyper_parameters_as_text"] == ["encoder", "scaler"]
    pickled = saved["hyper_parameters_pickled"]  # a uint8 tensor: torch 2.2's weights_only load refuses bytes
    assert isinstance(pickled, torch.Tensor) and pickled.dtype == torch.uint8


def test_weights_only_true_runs_nothing_and_names_the_entries(files):
    WithObjects = _module_class(lockstep)
    given = WithObjects.load_from_checkpoint(files["lockstep"], scaler=Scaler(0.0, 1.0), encoder=nn.Linear(3, 4))
    assert given.scaler == Scaler(0.0, 1.0)
    before = Scaler.unpickled  # (save_hyperparameters' deep copy rebuilds one too)
    with pytest.raises(
        TypeError,
        match=r"the checkpoint holds \['encoder', 'scaler'\] as objects that only unpickling rebuilds.*If you trust "
        r"the file, pass weights_only=False to rebuild them \(as Lightning does\); otherwise pass encoder=\.\.\., "
        r"scaler=\.\.\. to load_from_checkpoint",
    ):
        WithObjects.load_from_checkpoint(files["lockstep"])
    # Lightning's file holds the objects themselves: torch's safe unpickler stops at the first one
    with pytest.raises(CheckpointError, match=r"Unsupported global: GLOBAL tests\.helpers\.hparams_objects\.Scaler.*"
                       r"YourModule\.load_from_checkpoint\(path, weights_only=False\)"):
        WithObjects.load_from_checkpoint(files["lightning"], weights_only=True)
    assert Scaler.unpickled == before
