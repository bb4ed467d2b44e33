"""`StochasticWeightAveraging` against Lightning's on one process: the same final parameters and
BatchNorm statistics (1e-6) and learning rates, with and without BatchNorm, both annealing
strategies, a replaced scheduler, a custom ``avg_fn``, and a fit resumed in the middle of SWA."""
from __future__ import annotations

import pytest
import torch

from tests.helpers.lightning_parity import fit, framework, make_module
from tests.helpers.optional import importorskip

importorskip("lightning", reason="needs `lightning` (the bench extra)")


def _module(L, batchnorm, step_lr):
    base = make_module(L, batchnorm=batchnorm)
    if not step_lr:
        return base()

    class WithScheduler(base):
        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=self.learning_rate, momentum=0.9)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)]

    return WithScheduler()


def _ema(averaged, current, num_averaged):
    return 0.7 * averaged + 0.3 * current


CONFIGS = {
    "batchnorm_cos": ({"swa_lrs": 0.02, "swa_epoch_start": 2, "annealing_epochs": 2}, True, False),
    "linear_fraction_step_lr": (
        {"swa_lrs": 0.03, "swa_epoch_start": 0.5, "annealing_epochs": 1, "annealing_strategy": "linear"}, False, True),
    "batchnorm_avg_fn_list": ({"swa_lrs": [0.01], "swa_epoch_start": 3, "avg_fn": _ema}, True, True),
}


def _run(name, kwargs, batchnorm, step_lr, epochs=5, **trainer_args):
    L, cbs = framework(name)
    model = _module(L, batchnorm, step_lr)
    swa = cbs.StochasticWeightAveraging(**kwargs)
    trainer, model = fit(name, [swa, *trainer_args.pop("callbacks", [])], epochs=epochs, module=model, **trainer_args)
    return trainer, model, swa


def _same(mine, theirs):
    a, b = mine.state_dict(), theirs.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key].float(), b[key].float(), atol=1e-6, rtol=0, msg=key)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kwargs, batchnorm, step_lr", CONFIGS.values(), ids=CONFIGS.keys())
def test_swa_matches_lightning(kwargs, batchnorm, step_lr):
    l_trainer, l_model, l_swa = _run("lightning", kwargs, batchnorm, step_lr)
    o_trainer, o_model, o_swa = _run("lockstep", kwargs, batchnorm, step_lr)
    _same(o_model, l_model)
    if not batchnorm:  # Lightning's BatchNorm epoch steps SWALR once more (its training uses no lr)
        assert [g["lr"] for g in o_trainer.optimizers[0].param_groups] == pytest.approx(
            [g["lr"] for g in l_trainer.optimizers[0].param_groups], abs=1e-9)
    assert int(o_swa.n_averaged) == int(l_swa.n_averaged)
    assert o_trainer.global_step == 20  # 5 epochs of 4 steps (Lightning's BatchNorm epoch adds one: 21)
    plain = make_module(framework("lightning")[0], batchnorm=batchnorm)()  # SWA changed the result
    assert not torch.allclose(next(o_model.parameters()), next(plain.parameters()))


class _StopAfter:
    """Stops the fit at the end of epoch ``epoch`` (0-based): a job cut off in the middle of SWA."""

    def __init__(self, cbs, epoch):
        outer = self

        class Stop(cbs.Callback):
            def on_train_epoch_end(self, trainer, module):
                if trainer.current_epoch == outer.epoch:
                    trainer.should_stop = True

        self.epoch = epoch
        self.callback = Stop()


@pytest.mark.timeout(240)
def test_resumed_in_the_middle_of_swa_ends_as_lightning_uninterrupted(tmp_path):
    kwargs, batchnorm, step_lr = CONFIGS["batchnorm_cos"]
    _, l_model, _ = _run("lightning", kwargs, batchnorm, step_lr)
    _, cbs = framework("lockstep")
    ckpt = cbs.ModelCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=0)
    first, stopped, _ = _run("lockstep", kwargs, batchnorm, step_lr, callbacks=[ckpt, _StopAfter(cbs, 2).callback])
    assert first.current_epoch == 3  # epochs 0-2 trained; SWA averaged the starts of epochs 1 and 2
    _, resumed, swa = _run("lockstep", kwargs, batchnorm, step_lr, ckpt_path=str(tmp_path / "last.ckpt"))
    _same(resumed, l_model)
    assert int(swa.n_averaged) == 4
