"""pytorch-tabular (tabular data): `TabularModel` with a `CategoryEmbeddingModelConfig` on a synthetic
regression table.

Drives the library's own Trainer construction (`TabularModel._prepare_trainer` reads
`pl.Trainer.__init__`'s signature and builds it from `TrainerConfig`), its `TabularDatamodule`, its
`BaseModel` LightningModule, its EarlyStopping and its `predict`.
"""
import numpy as np
import pandas as pd
from pytorch_tabular import TabularModel
from pytorch_tabular.config import DataConfig, OptimizerConfig, TrainerConfig
from pytorch_tabular.models import CategoryEmbeddingModelConfig

import _record

_record.seed(0)
rng = np.random.default_rng(0)
n = 192
table = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), "c": rng.integers(0, 3, size=n).astype(str)})
table["y"] = 2 * table.a - table.b + (table.c == "1") + 0.1 * rng.normal(size=n)
train, valid, test = table.iloc[:128], table.iloc[128:160], table.iloc[160:]

kwargs = _record.library_kwargs()
trainer_config = TrainerConfig(
    batch_size=32, max_epochs=2, accelerator="cpu", devices=kwargs.pop("devices"), seed=0,
    checkpoints=None, early_stopping="valid_loss", early_stopping_patience=5, load_best=False,
    progress_bar="none", trainer_kwargs={"strategy": kwargs["strategy"], "enable_model_summary": False})
model = TabularModel(
    data_config=DataConfig(target=["y"], continuous_cols=["a", "b"], categorical_cols=["c"]),
    model_config=CategoryEmbeddingModelConfig(task="regression", layers="16-8", learning_rate=0.01, seed=0),
    optimizer_config=OptimizerConfig(), trainer_config=trainer_config, verbose=False, suppress_lightning_logger=True)
model.fit(train=train, validation=valid, seed=0)
predictions = model.predict(test)
_record.save(model.trainer, model.model, predictions)
