"""lightning-uq-box (uncertainty): mean-variance estimation and MC dropout on its toy heteroscedastic
regression data module.

Drives the library's own LightningModules (`MVERegression` with a burn-in epoch, `MCDropoutRegression`:
`self.log`, `on_test_batch_end` writing its predictions CSV into `trainer.default_root_dir`), its
`LightningDataModule` (`ToyHeteroscedasticDatamodule`), `OptimizerCallable` partials,
`trainer.fit` and `trainer.test`, and its `predict_step` (mean and predictive uncertainty).
"""
import os
from functools import partial

import lightning.pytorch as pl
import torch
from lightning_uq_box.datamodules import ToyHeteroscedasticDatamodule
from lightning_uq_box.models import MLP
from lightning_uq_box.uq_methods import MCDropoutRegression, MVERegression, NLL

import _record

_record.seed(0)
records = {}
for name in ("mve", "mc_dropout"):
    datamodule = ToyHeteroscedasticDatamodule(n_points=160, batch_size=16)
    if name == "mve":
        model = MVERegression(MLP(n_inputs=1, n_hidden=[16, 16], n_outputs=2), burnin_epochs=1,
                              optimizer=partial(torch.optim.Adam, lr=1e-2))
    else:
        model = MCDropoutRegression(MLP(n_inputs=1, n_hidden=[16, 16], n_outputs=2, dropout_p=0.1),
                                    num_mc_samples=5, loss_fn=NLL(), optimizer=partial(torch.optim.Adam, lr=1e-2))
    os.makedirs(name, exist_ok=True)  # where the library writes its predictions CSV
    trainer = pl.Trainer(accelerator="cpu", logger=False, max_epochs=2, enable_checkpointing=False,
                         default_root_dir=name, **_record.trainer_kwargs())
    trainer.fit(model, datamodule=datamodule)
    tested = trainer.test(model, datamodule=datamodule)
    torch.manual_seed(1)  # MC dropout samples: the same draws on both sides
    predicted = model.predict_step(torch.linspace(-4, 4, 32).unsqueeze(-1))
    records[name] = {"trainer": trainer, "model": model, "tested": tested, "predicted": predicted}

last = records["mc_dropout"]
_record.save(last["trainer"], last["model"], last["predicted"], tested=last["tested"],
             mve_params=records["mve"]["model"].state_dict(), mve_predictions=records["mve"]["predicted"],
             mve_tested=records["mve"]["tested"], mve_global_step=records["mve"]["trainer"].global_step)
