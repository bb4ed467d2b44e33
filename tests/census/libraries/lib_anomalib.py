"""anomalib (anomaly detection): its `Engine` training `Ganomaly` on a `Folder` data module of
synthetic images (plain noise as normal, noise with a bright square as abnormal), written to disk.

Drives the library's own Trainer construction (`Engine` builds `Trainer` with its callbacks:
checkpointing, timing, the post-processor's threshold and normalisation, the evaluator's metrics),
its `AnomalibModule` in manual optimisation (a GAN: two optimizers), its `Folder` LightningDataModule,
and `Engine.fit`, `Engine.test` and `Engine.predict`.
"""
from pathlib import Path

import numpy as np
from anomalib.data import Folder
from anomalib.engine import Engine
from anomalib.models import Ganomaly
from PIL import Image

import _record

_record.seed(0)
rng = np.random.default_rng(0)
for kind, count in (("good", 24), ("bad", 8)):
    Path("images", kind).mkdir(parents=True, exist_ok=True)
    for i in range(count):
        pixels = (rng.random((32, 32, 3)) * 96).astype(np.uint8)
        if kind == "bad":
            pixels[8:20, 8:20] = 255
        Image.fromarray(pixels).save(f"images/{kind}/{i:03d}.png")

datamodule = Folder(name="synthetic", root="images", normal_dir="good", abnormal_dir="bad", train_batch_size=8,
                    eval_batch_size=8, num_workers=0, seed=0)
model = Ganomaly(batch_size=8, n_features=8, latent_vec_size=16,
                 pre_processor=Ganomaly.configure_pre_processor(image_size=(32, 32)), visualizer=False)
kwargs = _record.library_kwargs()
if kwargs["devices"] > 1:  # a GAN in manual optimization: each optimizer's step leaves the other's parameters unused
    kwargs["strategy"] = "ddp_find_unused_parameters_true"
engine = Engine(max_epochs=2, logger=False, default_root_dir="results", **kwargs)
engine.fit(model=model, datamodule=datamodule)
tested = engine.test(model=model, datamodule=datamodule)
predictions = engine.predict(model=model, dataloaders=datamodule.test_dataloader())
scores = [p.pred_score for p in predictions]
_record.save(engine.trainer, model, scores, tested=tested)
