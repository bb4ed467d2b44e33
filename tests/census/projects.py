"""The census: public Lightning 2.x projects, pinned to a commit, and how each is shrunk to run in seconds.

A project's files are vendored byte for byte (`tests.census.vendor`) from ``repo`` at ``commit``;
``script`` runs as ``__main__`` with ``argv`` (or, for a project of modules, the harness's ``entry``
that builds what the project's configs build); a notebook's code cells run as one script, its
IPython lines (``!``, ``%``, ``%%`` cells) left out, as a script export of it leaves them out.
``trainer`` holds the `Trainer` arguments the harness sets on every `Trainer` the script builds (`TRAINER_BASE` first: CPU, one device, a few batches);
``shrink`` names the harness-side patches of `tests.census.shrink`. ``integration`` names the
third-party library the project runs with Lightning (the runner's acceptance line counts those).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# every Trainer the census runs: CPU, one device, a few batches of each loop, no progress bar
TRAINER_BASE: dict[str, Any] = {
    "accelerator": "cpu", "devices": 1, "max_epochs": 1, "limit_train_batches": 4, "limit_val_batches": 2,
    "limit_test_batches": 2, "limit_predict_batches": 2, "enable_progress_bar": False,
}


@dataclass(frozen=True)
class Project:
    """One census entry: where its files come from and how the harness runs it."""

    name: str
    repo: str
    commit: str
    script: str
    license_file: str
    license: str
    helpers: tuple[str, ...] = ()
    argv: tuple[str, ...] = ()
    trainer: dict[str, Any] = field(default_factory=dict)
    shrink: tuple[str, ...] = ()
    integration: str = ""
    cells: int = 0  # a notebook: how many of its code cells run (0: all)
    entry: str = ""  # a harness entry (tests/census/entries/) run instead of ``script``, for a project of modules
    requires: tuple[str, ...] = ()  # modules it imports that the `dev` extra does not install
    tree: bool = False  # helpers keep their folders under the script's (a script that imports its own packages)

    def trainer_overrides(self) -> dict[str, Any]:
        """The `Trainer` arguments the harness sets: `TRAINER_BASE`, then the project's own."""
        return {**TRAINER_BASE, **self.trainer}


_TUTORIALS = ("Lightning-AI/tutorials", "15817658a2d63afa338b9e1cd8454fb98d746fac", "LICENSE", "Apache-2.0")
_LIGHTNING = ("Lightning-AI/pytorch-lightning", "7f0c3436cd3f6ad3753125672024fc415cbcb414", "LICENSE", "Apache-2.0")
_LIGHTLY = ("lightly-ai/lightly", "e8d317fc5a87f4387a85a35e689869039ec249ee", "LICENSE.txt", "MIT")
_PYG = ("pyg-team/pytorch_geometric", "5c6461b2305ad068a6d61165b3c55852a11aaa41", "LICENSE", "MIT")
_FORECASTING = ("sktime/pytorch-forecasting", "062aeb47b75d589dcce621c04572181e3584a301", "LICENSE", "MIT")
_HYDRA = ("ashleve/lightning-hydra-template", "bddbc24b82ab6ccfa6243e815a49dc5bfe8d4144", "README.md", "MIT (README.md)")
_UVADLC = ("phlippe/uvadlc_notebooks", "0da8037c7abc32f478ff6142acceb72dbcf088ee", "LICENSE.md", "MIT")
_OPTUNA = ("optuna/optuna-examples", "2e0b10bc54501e801687e114de3cbe1b6d2407dc", "LICENSE", "MIT")
# a fork's snapshot of pytorch/audio (whose own is too large to bring here) at upstream commit f1a9f79 (2023-09-23)
_TORCHAUDIO = ("RuneBlaze/audioio", "f1a9f79d198722e3cea0b7759773441aaa6f9303", "LICENSE", "BSD-2-Clause")
_MONAI = ("Project-MONAI/tutorials", "b3c6c998c931d78b61c4d32b37f962a987400f8a", "LICENSE", "Apache-2.0")
_SMP = ("qubvel-org/segmentation_models.pytorch", "5006616357631a48c7c8e11977cf5abb00803590", "LICENSE", "MIT")


def _project(name: str, source: tuple[str, str, str, str], script: str, **kwargs: Any) -> Project:
    repo, commit, license_file, license = source
    return Project(name, repo, commit, script, license_file, license, **kwargs)


PROJECTS: dict[str, Project] = {p.name: p for p in [
    _project("bug_report_model", _LIGHTNING, "examples/pytorch/bug_report/bug_report_model.py"),
    _project("tutorial_mnist_hello_world", _TUTORIALS, "lightning_examples/mnist-hello-world/hello-world.py",
             shrink=("torchvision",), integration="torchmetrics"),
    _project("tutorial_basic_gan", _TUTORIALS, "lightning_examples/basic-gan/gan.py", shrink=("torchvision",)),
    _project("optuna_lightning_simple", _OPTUNA, "pytorch/pytorch_lightning_simple.py",
             shrink=("torchvision", "optuna"), integration="optuna (PyTorchLightningPruningCallback)"),
    _project("lightning_gan_demos_mnist", _LIGHTNING, "examples/pytorch/domain_templates/generative_adversarial_net.py",
             shrink=("lightning_demos_mnist",)),
    # 100 batches: the script's Trainer(val_check_interval=100) needs as many (Lightning checks it)
    _project("lightning_dqn_cartpole", _LIGHTNING, "examples/pytorch/domain_templates/reinforce_learn_Qnet.py",
             trainer={"limit_train_batches": 100}, shrink=("cart_pole_gym",)),
    _project("tutorial_datamodules", _TUTORIALS, "lightning_examples/datamodules/datamodules.py",
             shrink=("torchvision",), integration="torchmetrics"),
    *[_project(f"lightly_{name}", _LIGHTLY, f"examples/pytorch_lightning/{name}.py", trainer={"limit_train_batches": 2},
               shrink=("torchvision", "batches_of_8"), integration="lightly")
      for name in ("simclr", "byol", "moco", "simsiam", "barlowtwins", "vicreg", "nnclr", "dcl", "tico", "fastsiam")],
    _project("pyg_gin", _PYG, "examples/pytorch_lightning/gin.py", trainer={"strategy": "auto"},
             shrink=("pytorch_lightning_only", "pyg_tudataset"), integration="torch_geometric (LightningDataset), torchmetrics"),
    _project("hydra_template_mnist", _HYDRA, "src/models/mnist_module.py",
             helpers=("src/models/components/simple_dense_net.py", "src/data/mnist_datamodule.py"),
             entry="hydra_template_mnist.py", trainer={"max_epochs": 2}, shrink=("torchvision",), integration="torchmetrics"),
    # its first 25 code cells: the reverse task (synthetic sequences); the rest needs a pretrained ResNet-34
    _project("uvadlc_transformers_reverse", _UVADLC, "docs/tutorial_notebooks/tutorial6/Transformers_and_MHAttention.ipynb",
             cells=25, shrink=("offline_downloads",)),
    _project("uvadlc_inception_resnet_densenet", _UVADLC,
             "docs/tutorial_notebooks/tutorial5/Inception_ResNet_DenseNet.ipynb",
             shrink=("torchvision", "batches_of_8", "offline_downloads")),
    # pytorch-forecasting is not in `dev`: its wheel installs a top-level `tests` package (docs/migration.md)
    # every prediction batch: the script compares the predictions with the whole validation set's targets
    _project("forecasting_deepar_ar", _FORECASTING, "examples/ar.py", integration="pytorch_forecasting",
             trainer={"limit_predict_batches": 1.0}, shrink=("pandas_2_names",), requires=("pytorch_forecasting",)),
    _project("forecasting_nbeats", _FORECASTING, "examples/nbeats.py", integration="pytorch_forecasting",
             requires=("pytorch_forecasting",)),
    # Lightning's basic examples on its demos (lightning.pytorch.demos: Lockstep's trainer.lightning.demos)
    _project("lightning_basics_transformer", _LIGHTNING, "examples/pytorch/basics/transformer.py",
             shrink=("wikitext2_local",)),
    _project("lightning_basics_autoencoder", _LIGHTNING, "examples/pytorch/basics/autoencoder.py",
             shrink=("torchvision",)),
    _project("lightning_basics_backbone", _LIGHTNING, "examples/pytorch/basics/backbone_image_classifier.py",
             shrink=("torchvision",)),
    # segmentation; its first 12 code cells: train, validate, test (the rest pushes to and pulls from the Hub)
    _project("smp_binary_segmentation_intro", _SMP, "examples/binary_segmentation_intro.ipynb", cells=12,
             shrink=("smp_offline", "batches_of_8"), integration="segmentation_models_pytorch"),
    # segmentation (3D); its first 7 code cells: the training (the rest plots on a CUDA device)
    _project("monai_spleen_segmentation_3d", _MONAI, "3d_segmentation/spleen_segmentation_3d_lightning.ipynb", cells=7,
             shrink=("monai_offline",), integration="monai"),
    # audio: speech separation (Conv-TasNet on LibriMix mixtures), torchaudio's own Lightning example
    _project("torchaudio_convtasnet_librimix", _TORCHAUDIO, "examples/source_separation/lightning_train.py",
             helpers=tuple(f"examples/source_separation/utils/{name}.py" for name in
                           ("__init__", "dist_utils", "metrics", "dataset/__init__", "dataset/utils", "dataset/wsj0mix")),
             tree=True, argv=("--root-dir", ".", "--batch-size", "2"), shrink=("torchaudio_librimix",),
             integration="torchaudio (ConvTasNet, LibriMix)"),
]}
