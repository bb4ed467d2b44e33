"""Issue 12's acceptance: a Lightning 2.x project runs on Lockstep with only its imports renamed
and computes the same numbers.

Five projects written the way Lightning's public examples are (`lightning_examples/`): a
classifier with its own data hooks and a torchmetrics Accuracy, an autoencoder fed by a
LightningDataModule, a GAN with two optimizers in manual optimization, and the language model of
Lightning's ``examples/pytorch/basics/transformer.py`` on Lightning's demo Transformer and
WikiText2 (plain torch code, imported on both sides: `porting.KEPT_IMPORTS`), and the deep
Q-network of Lightning's ``reinforce_learn_Qnet.py`` (an IterableDataset replay buffer, an agent
playing a cart-pole inside ``training_step``, the old dict return). Each runs on Lightning and,
with the import lines renamed (`porting.IMPORT_RENAMES`), on Lockstep: 1 process, CPU, 32-true,
same seed. Same final parameters to 1e-6, same names logged. The GAN also runs on 2 Lockstep ranks
and matches Lightning's 1-process run with the whole batch.

Settings that only decide output (progress bar, model summary, checkpoint files) are off on both;
they change no number. What the loggers receive differs by design in a few names, dropped by
`_by_design`, as docs/migration.md lists.
"""
from __future__ import annotations

import glob
import os
from typing import Any

import pytest
import torch

from tests.helpers.distributed import run_ranks
from tests.helpers.optional import importorskip
from tests.port.porting import IMPORT_RENAMES, KEPT_IMPORTS, load, ported_source

importorskip("lightning", reason="needs `lightning` (the dev extra: pip install -e '.[dev]')")
importorskip("torchmetrics", reason="needs `torchmetrics` (the dev extra)")

EXAMPLES = ["classifier", "autoencoder", "gan", "transformer", "dqn"]
# with the examples' own accelerator="cpu"
SAME = {
    "devices": 1,
    "precision": "32-true",
    "deterministic": True,
    "enable_progress_bar": False,
    "enable_model_summary": False,
    "enable_checkpointing": False,
}


@pytest.fixture(autouse=True)
def _one_thread():
    """Both frameworks on one intra-op thread: on a shared, loaded machine two threads spin-wait on
    each other (the transformer's steps take 50x longer); the numbers compared are the same."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _logger_names(root: str) -> tuple[set[str], set[str]]:
    """Scalar and image tags in every TensorBoard event file under ``root``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars: set[str] = set()
    images: set[str] = set()
    for path in glob.glob(os.path.join(root, "**", "events.out.tfevents.*"), recursive=True):
        events = EventAccumulator(path, size_guidance={"scalars": 0, "images": 0})
        events.Reload()
        scalars |= set(events.Tags()["scalars"])
        images |= set(events.Tags()["images"])
    return scalars, images


def _by_design(scalars: set[str]) -> set[str]:
    """Names left out of the comparison: TensorBoard's ``hp_metric`` placeholder (both write it
    with hyperparameters; Lightning also after an empty ``save_hyperparameters()``), the learning
    rates of Lockstep's default LearningRateMonitor (``lr-Adam``...)."""
    return {s for s in scalars if s == "hp_metric" or s.startswith("lr-")}


def _run(name: str, framework: str, root: str, **kwargs: Any) -> dict[str, Any]:
    model, trainer = load(name, framework).main(root, **{**SAME, **kwargs})
    scalars, images = _logger_names(root)
    return {
        "params": {k: p.detach().cpu().clone() for k, p in model.named_parameters()},
        "global_step": trainer.global_step,
        "callback_metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
        "logged_metrics": set(trainer.logged_metrics),
        "logger_scalars": scalars - _by_design(scalars),
        "logger_images": images,
    }


def _assert_same_parameters(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], atol: float) -> None:
    assert got.keys() == want.keys()
    for key in want:
        diff = (got[key] - want[key]).abs().max().item()
        assert diff <= atol, f"{key}: differs by {diff:.3g} (> {atol})"


@pytest.mark.parametrize("name", EXAMPLES)
def test_only_the_import_lines_are_renamed(name):
    original, ported = ported_source(name)
    changed = [(a, b) for a, b in zip(original.split("\n"), ported.split("\n")) if a != b]
    assert changed, "the example imports nothing from Lightning"
    assert all(IMPORT_RENAMES.get(a) == b for a, b in changed)
    kept = "\n".join(line for line in ported.split("\n") if line not in KEPT_IMPORTS)
    assert "lightning" not in kept.replace("Lightning", "")  # no Lightning import is left


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_lightning_example_on_lockstep_computes_lightnings_numbers(name, tmp_path):
    want = _run(name, "lightning", str(tmp_path / "lightning"))
    # One Lightning process shuffles with the loader's own RandomSampler (the global RNG); Lockstep
    # trains on its world-size-invariant permutation unless told to keep the loader's sampler
    # (docs/migration.md), which is what a comparison of the numbers needs.
    got = _run(name, "lockstep", str(tmp_path / "lockstep"), use_distributed_sampler=False)
    _assert_same_parameters(got["params"], want["params"], atol=1e-6)
    assert got["global_step"] == want["global_step"]
    for names in ("logged_metrics", "logger_scalars", "logger_images"):
        assert got[names] == want[names], names
    assert got["callback_metrics"] == pytest.approx(want["callback_metrics"], abs=1e-6)  # names and values
    assert want["logger_scalars"]  # something was logged to compare


def _gan_on_rank(rank: int, world_size: int, root: str) -> dict[str, Any]:
    # the strategy name a Lightning GAN needs under DDP (toggle_optimizer leaves parameters unused)
    strategy = "ddp_find_unused_parameters_true"
    model, trainer = load("gan", "lockstep").main(root, batch_size=4, **{**SAME, "devices": 2, "strategy": strategy})
    return {
        "params": {k: p.detach().clone() for k, p in model.named_parameters()},
        "global_step": trainer.global_step,
        "callback_metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
    }


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_lightning_gan_on_two_lockstep_ranks_matches_lightning_with_the_whole_batch(tmp_path):
    results = run_ranks(_gan_on_rank, args=(str(tmp_path / "lockstep"),), init_group=False, timeout=200)
    want = _run("gan", "lightning", str(tmp_path / "lightning"), batch_size=8)
    for rank in results:
        assert rank["global_step"] == want["global_step"]
        assert rank["callback_metrics"].keys() == want["callback_metrics"].keys()
        _assert_same_parameters(rank["params"], want["params"], atol=1e-6)
    scalars, images = _logger_names(str(tmp_path / "lockstep"))
    assert scalars - _by_design(scalars) == want["logger_scalars"]
    assert images == want["logger_images"]


@pytest.mark.slow
def test_a_checkpoint_lightning_wrote_loads_with_load_from_checkpoint(tmp_path):
    model, trainer = load("autoencoder", "lightning").main(str(tmp_path), **SAME)
    trainer.save_checkpoint(tmp_path / "lightning.ckpt")
    ported = load("autoencoder", "lockstep").LitAutoEncoder
    loaded = ported.load_from_checkpoint(tmp_path / "lightning.ckpt", lr=0.5)
    assert isinstance(loaded, ported) and not loaded.training
    assert loaded.hparams.latent_dim == 4 and loaded.hparams.lr == 0.5  # saved hparams, then overrides
    want = {k: p.detach() for k, p in model.named_parameters()}
    _assert_same_parameters({k: p.detach() for k, p in loaded.named_parameters()}, want, atol=0.0)
