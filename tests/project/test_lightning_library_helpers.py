"""Issue 41 build item 7: Lightning helpers that the libraries of the library census
(tests/census/libraries) use, answering as Lightning's do: ``rank_prefixed_message`` and
``rank_zero_experiment`` (scvi-tools' callbacks and ``SimpleLogger``), and an ``_AcceleratorConnector``
built from the Trainer's flags (scvi-tools' ``parse_device_args`` reads ``_accelerator_flag`` and
``_devices_flag`` off one)."""
from __future__ import annotations

import pytest
from tests.helpers.optional import importorskip

from trainer.lightning.accelerator_connector import _AcceleratorConnector
from trainer.loggers import rank_zero_experiment
from trainer.utilities import rank_prefixed_message

pytestmark = pytest.mark.timeout(60)

FLAGS = [("cpu", 1), ("cpu", 2), ("cpu", "auto"), ("auto", "auto"), ("cpu", "3"), ("auto", 1)]


def test_rank_prefixed_message_as_lightning():
    theirs = importorskip("lightning.pytorch.utilities.rank_zero").rank_prefixed_message

    for rank in (None, 0, 3):
        assert rank_prefixed_message("saved", rank) == theirs("saved", rank)


def test_rank_zero_experiment_gives_the_experiment_on_rank_zero_and_a_do_nothing_one_elsewhere(monkeypatch):
    class Logger:
        @property
        @rank_zero_experiment
        def experiment(self):
            return {"run": 1}

    assert Logger().experiment == {"run": 1}
    monkeypatch.setattr("trainer.loggers.current_global_rank", lambda: 1)
    dummy = Logger().experiment
    assert dummy.add_image("x", 1) is None and dummy[0].log(3) is None


@pytest.mark.parametrize("accelerator, devices", FLAGS)
def test_a_connector_built_from_flags_resolves_them_as_lightning(accelerator, devices):
    importorskip("lightning.pytorch")
    from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector as Theirs

    theirs, ours = Theirs(accelerator=accelerator, devices=devices), _AcceleratorConnector(accelerator=accelerator, devices=devices)
    assert (ours._accelerator_flag, ours._devices_flag, ours.is_distributed) == (
        theirs._accelerator_flag, theirs._devices_flag, theirs.is_distributed)
