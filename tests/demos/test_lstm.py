"""`trainer.lightning.demos.lstm` against Lightning's: `SequenceSampler`'s batches, `SimpleLSTM`'s weights
and outputs, and `LightningLSTM` fitted a few steps on a small local WikiText-2 file (its hidden
state carried from batch to batch): the same parameters (1e-6) and the same logged loss."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.demos_parity import demos, fit_both, max_parameter_difference, write_corpus
from tests.helpers.optional import importorskip

importorskip("lightning", reason="the comparison needs `lightning` (the dev extra)")


@pytest.mark.parametrize("length, batch_size", [(10, 3), (12, 4), (5, 5), (61, 20)])
def test_sequence_sampler_gives_lightning_s_batches(length, batch_size):
    data = list(range(length))
    theirs, ours = (demos(f).lstm.SequenceSampler(data, batch_size) for f in ("lightning", "lockstep"))
    assert list(theirs) == list(ours) and len(theirs) == len(ours) == length // batch_size
    assert all(len(batch) == batch_size for batch in ours)


def test_simple_lstm_gives_lightning_s_weights_and_outputs():
    results = {}
    for framework in ("lightning", "lockstep"):
        torch.manual_seed(4)
        model = demos(framework).lstm.SimpleLSTM(vocab_size=30, ninp=8, nhid=6, nlayers=2)
        hidden = model.init_hidden(3)
        results[framework] = (model, *model(torch.randint(0, 30, (3, 5)), hidden), torch.randn(1))
    (t_model, t_out, t_hidden, t_next), (o_model, o_out, o_hidden, o_next) = results["lightning"], results["lockstep"]
    assert max_parameter_difference(t_model, o_model) == 0
    assert o_out.shape == (15, 30) and torch.allclose(t_out, o_out, atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(t_hidden, o_hidden))
    assert torch.equal(t_next, o_next)
    assert float(o_model.decoder.bias.detach().abs().max()) == 0 and float(o_model.encoder.weight.detach().abs().max()) <= 0.1


@pytest.mark.timeout(300)  # two fits of an LSTM in one process: 30 s idle, over 120 s on a loaded 2-core machine
def test_lightning_lstm_fits_to_lightning_s_parameters(tmp_path):
    write_corpus(Path("data"), lines=300)  # 76 blocks of 35: 3 batches of 20 streams an epoch (2 of them run)

    def build(d):
        return d.lstm.LightningLSTM(vocab_size=d.transformer.WikiText2().vocab_size)

    runs = fit_both(build, max_epochs=2, limit_train_batches=2)
    (theirs, t_trainer), (ours, o_trainer) = runs["lightning"], runs["lockstep"]
    assert o_trainer.global_step == t_trainer.global_step == 4
    assert max_parameter_difference(theirs, ours) < 1e-6
    assert ours.hidden is None and theirs.hidden is None  # reset at each epoch's end
    assert float(o_trainer.callback_metrics["train_loss"]) == pytest.approx(float(t_trainer.callback_metrics["train_loss"]), abs=1e-6)
