"""Lightning's private Trainer attributes that libraries built on the Trainer read (the ecosystem
scan, docs/ecosystem_scan.json: ``trainer._checkpoint_connector`` in finetuning-scheduler and NeMo,
``trainer._logger_connector``, ``trainer._results``, ...). Lockstep keeps no such connectors: reading
one raises `NotProvidedAttributeError` naming what to use (``trainer._accelerator_connector`` is a
view: `trainer.lightning.accelerator_connector`).
"""
from __future__ import annotations

# attribute -> what to use instead
NOT_PROVIDED_PRIVATE_TRAINER_ATTRIBUTES: dict[str, str] = {
    "_checkpoint_connector": "fit(ckpt_path=...) to resume, trainer.save_checkpoint(path) to save, and the "
    "on_load_checkpoint / on_save_checkpoint hooks to read or add to what the checkpoint holds",
    "_logger_connector": "Trainer(logger=...), trainer.loggers and self.log in the module",
    "_results": "trainer.callback_metrics, trainer.logged_metrics and trainer.progress_bar_metrics",
    "_data_connector": "the datamodule or loaders given to fit / validate / test / predict, and "
    "trainer.train_dataloader / val_dataloaders / test_dataloaders / predict_dataloaders",
    "_callback_connector": "Trainer(callbacks=[...]) and trainer.callbacks",
    "_signal_connector": "nothing: on SIGTERM Lockstep saves a checkpoint and exits itself (docs/fault-tolerance.md)",
}
