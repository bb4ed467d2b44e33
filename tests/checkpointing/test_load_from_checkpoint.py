"""``load_from_checkpoint``: a module (or DataModule) rebuilt from a checkpoint's hyperparameters
and state, in a fresh process, with overrides, ``strict`` and clear errors."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch
from torch import nn

from tests.helpers.distributed import REPO_ROOT
from tests.helpers.models import QUIET, Regression, loader, params_of, regression_data
from trainer import CheckpointError, DataModule, Trainer

INPUTS = torch.linspace(-2, 2, 40).reshape(10, 4)


def _fit_and_save(module: Any, path: Any, datamodule: Any = None, **fit: Any) -> Trainer:
    trainer = Trainer(max_epochs=2, accelerator="cpu", **QUIET)
    if datamodule is None:
        fit.setdefault("train_dataloaders", loader(regression_data(32), 8))
    trainer.fit(module, datamodule=datamodule, **fit)
    trainer.save_checkpoint(path)
    return trainer


@pytest.mark.launches
def test_a_fresh_process_predicts_the_same_numbers(tmp_path):
    module = Regression(optimizer="adamw", lr=0.02)
    _fit_and_save(module, tmp_path / "model.ckpt")
    module.eval()
    with torch.no_grad():
        expected = module(INPUTS)
    script = textwrap.dedent(
        f"""
        import sys, torch
        from tests.helpers.models import Regression
        model = Regression.load_from_checkpoint({str(tmp_path / "model.ckpt")!r})
        assert not model.training and model.device == torch.device("cpu"), (model.training, model.device)
        assert dict(model.hparams) == {{"optimizer": "adamw", "lr": 0.02, "features": 4, "seed": 0}}, model.hparams
        with torch.no_grad():
            torch.save(model(torch.linspace(-2, 2, 40).reshape(10, 4)), {str(tmp_path / "out.pt")!r})
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", script], check=True, cwd=REPO_ROOT, env=env, timeout=100)
    predicted = torch.load(tmp_path / "out.pt", weights_only=True)
    assert not torch.equal(expected, Regression()(INPUTS).detach())  # trained
    assert torch.equal(predicted, expected)


def test_overrides_win_over_the_saved_hyperparameters(tmp_path):
    module = Regression(lr=0.02)
    _fit_and_save(module, tmp_path / "model.ckpt")
    loaded = Regression.load_from_checkpoint(tmp_path / "model.ckpt", map_location="cpu", lr=0.5, optimizer="adamw")
    assert loaded.hparams == {"optimizer": "adamw", "lr": 0.5, "features": 4, "seed": 0}
    assert loaded.hparams.lr == 0.5
    assert all(torch.equal(a, b) for a, b in zip(params_of(module), params_of(loaded)))


class WithBackbone(Regression):
    """Lightning's common pattern: the module object is not a hyperparameter."""

    def __init__(self, backbone: nn.Module, width: int, lr: float = 0.05) -> None:
        super().__init__(lr=lr)
        self.save_hyperparameters(ignore=["backbone"])
        self.backbone = backbone

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def test_arguments_that_were_not_saved_are_named(tmp_path):
    module = WithBackbone(nn.Linear(4, 4), width=3)
    _fit_and_save(module, tmp_path / "model.ckpt")
    with pytest.raises(
        TypeError,
        match=r"WithBackbone.load_from_checkpoint\(.*\): __init__ needs \['backbone'\], which the checkpoint's "
        r"hyperparameters do not hold \(saved: \['features', 'lr', 'optimizer', 'seed', 'width'\]\). Pass backbone=\.\.\.",
    ):
        WithBackbone.load_from_checkpoint(tmp_path / "model.ckpt")
    loaded = WithBackbone.load_from_checkpoint(tmp_path / "model.ckpt", backbone=nn.Linear(4, 4))
    # the base class's save_hyperparameters() records its arguments too, as in Lightning
    assert loaded.hparams == {"width": 3, "lr": 0.05, "optimizer": "sgd", "features": 4, "seed": 0}
    assert all(torch.equal(a, b) for a, b in zip(params_of(module), params_of(loaded)))


class WithSavedBackbone(Regression):
    """torchaudio's Conv-TasNet example: the model object saved as a hyperparameter too."""

    def __init__(self, backbone: nn.Module, width: int = 3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.backbone = backbone


def test_an_object_the_checkpoint_holds_only_as_text_is_not_passed_to_init(tmp_path):
    module = WithSavedBackbone(nn.Linear(4, 4))
    _fit_and_save(module, tmp_path / "model.ckpt")
    checkpoint = torch.load(tmp_path / "model.ckpt", weights_only=True)
    assert checkpoint["hyper_parameters"]["backbone"] == "Linear(in_features=4, out_features=4, bias=True)"
    assert checkpoint["hyper_parameters_as_text"] == ["backbone"]
    # its repr in place of the module would build a module without the backbone's weights; the
    # module itself is in the file, rebuilt only for a caller who trusts it (test_hparams_objects.py)
    with pytest.raises(
        TypeError,
        match=r"WithSavedBackbone.load_from_checkpoint\(.*\): the checkpoint holds \['backbone'\] as objects that "
        r"only unpickling rebuilds.*, and __init__ cannot take it in their place. If you trust the file, pass "
        r"weights_only=False .*; otherwise pass backbone=\.\.\. to load_from_checkpoint",
    ):
        WithSavedBackbone.load_from_checkpoint(tmp_path / "model.ckpt")
    loaded = WithSavedBackbone.load_from_checkpoint(tmp_path / "model.ckpt", backbone=nn.Linear(4, 4))
    assert loaded.hparams.width == 3
    assert all(torch.equal(a, b) for a, b in zip(params_of(module), params_of(loaded)))


class Wider(Regression):
    """The saved module plus one layer the checkpoint does not have."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.head = nn.Linear(1, 1)


def test_strict_false_loads_what_matches(tmp_path):
    module = Regression(seed=1)
    _fit_and_save(module, tmp_path / "model.ckpt")
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "head.weight", "head.bias"'):
        Wider.load_from_checkpoint(tmp_path / "model.ckpt")
    loaded = Wider.load_from_checkpoint(tmp_path / "model.ckpt", strict=False)
    assert all(torch.equal(a, b) for a, b in zip(params_of(module), params_of(loaded.net)))
    # the layer the checkpoint lacks keeps what __init__ gave it (seeded by the saved seed)
    assert all(torch.equal(a, b) for a, b in zip(params_of(Wider(seed=1).head), params_of(loaded.head)))


def test_bad_map_location_and_unsafe_files_are_refused(tmp_path):
    _fit_and_save(Regression(), tmp_path / "model.ckpt")
    with pytest.raises(TypeError, match=r"load_from_checkpoint\(map_location=...\) takes a torch.device, a device string"):
        Regression.load_from_checkpoint(tmp_path / "model.ckpt", map_location={"cuda:0": "cpu"})
    loaded = Regression.load_from_checkpoint(tmp_path / "model.ckpt", map_location=torch.device("cpu"))
    assert loaded.device == torch.device("cpu")
    checkpoint = torch.load(tmp_path / "model.ckpt", weights_only=True)
    checkpoint["hyper_parameters"]["optimizer"] = _Unsafe()
    torch.save(checkpoint, tmp_path / "unsafe.ckpt")
    with pytest.raises(CheckpointError, match="Refused to load"):
        Regression.load_from_checkpoint(tmp_path / "unsafe.ckpt")


class _Unsafe:
    pass


class Numbers(DataModule):
    def __init__(self, batch_size: int, n: int = 32) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.cursor = 0

    def train_dataloader(self) -> Any:
        return loader(regression_data(self.hparams.n), self.hparams.batch_size)

    def state_dict(self) -> dict[str, Any]:
        return {"cursor": torch.tensor(self.cursor)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.cursor = int(state_dict["cursor"])


def test_a_datamodule_is_rebuilt_with_its_state(tmp_path):
    dm = Numbers(batch_size=4)
    dm.cursor = 7
    _fit_and_save(Regression(), tmp_path / "model.ckpt", datamodule=dm)
    loaded = Numbers.load_from_checkpoint(tmp_path / "model.ckpt")
    assert (loaded.hparams, loaded.cursor) == ({"batch_size": 4, "n": 32}, 7)
    assert Numbers.load_from_checkpoint(tmp_path / "model.ckpt", n=8).hparams == {"batch_size": 4, "n": 8}
    _fit_and_save(Regression(), tmp_path / "no-dm.ckpt")
    with pytest.raises(TypeError, match=r"Numbers.load_from_checkpoint\(.*\): __init__ needs \['batch_size'\]"):
        Numbers.load_from_checkpoint(tmp_path / "no-dm.ckpt")
