"""scvi-tools (single-cell): `SCVI` on its own synthetic AnnData (`scvi.data.synthetic_iid`), the
library's quick-start.

Drives the library's own `Trainer` subclass (`scvi.train.Trainer`: its callbacks, its `SimpleLogger`
whose history becomes `model.history`), its `TrainingPlan` LightningModule (KL warm-up, `log` of
its ELBO metrics per epoch), its `DataSplitter` LightningDataModule, and the model's
`get_latent_representation` and `get_normalized_expression` after training.
"""
import scvi

import _record

_record.seed(0)
scvi.settings.seed = 0
adata = scvi.data.synthetic_iid(batch_size=64, n_genes=40, n_batches=2, n_labels=2)
scvi.model.SCVI.setup_anndata(adata, batch_key="batch")
model = scvi.model.SCVI(adata, n_hidden=16, n_latent=4, n_layers=1)
kwargs = _record.library_kwargs()
if kwargs["devices"] > 1:
    kwargs["strategy"] = "ddp_find_unused_parameters_true"  # what scvi-tools' docs ask for on several devices
model.train(max_epochs=2, train_size=0.75, batch_size=32, plan_kwargs={"lr": 1e-2}, **kwargs)
predictions = {"latent": model.get_latent_representation(),
               "expression": model.get_normalized_expression(n_samples=1, return_numpy=True)}
_record.save(model.trainer, model.module, predictions, history=model.history)
