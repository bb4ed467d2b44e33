"""Validation, test, predict and the sanity check: one loop over one or more dataloaders."""
from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch

from trainer.accelerators.compilation import prepare_for_speed
from trainer.checkpointing.connector import load_weights
from trainer.data.batch_transfer import BatchTransfer
from trainer.data.datamodule import data_source
from trainer.hooks import module_override, takes_batch_idx
from trainer.data.loaders import as_loader_list, has_length, num_batches, short_loader_error
from trainer.metrics.metric_store import MetricStore
from trainer.model_setup import configure_model
from trainer.stage import EVALUATION, Stage
from trainer.strategies.strategy import lightning_rules
from trainer.contracts.user_line import user_stacklevel

if TYPE_CHECKING:
    from trainer.module import TrainModule
    from trainer.contracts.internals import ModuleInternals, TrainerInternals as Trainer


class EvaluationLoop:
    """Runs the stage's step (``validation_step``, ...) over its dataloaders with gradients off."""

    def __init__(self, trainer: Trainer, stage: Stage, within_fit: bool = False, log_step: int | None = None) -> None:
        self.trainer = trainer
        self.stage = stage
        self.within_fit = within_fit  # the fit's sanity check or validation: no_grad, as in Lightning
        self.log_step = log_step  # the step of the run's aggregates (None: the fit's steps so far)
        self.settings = EVALUATION[stage]
        self.metrics = MetricStore(training=False)
        self.dataloader_idx = 0
        self.batch_idx: int | None = None  # the batch being loaded or run (None: outside the batches)
        self._several = False
        self._first_step = True

    def setup(self, model: TrainModule, loaders: Any, ckpt_path: Any, weights_only: bool) -> list[Any]:
        """The stage's loaders (given, or the DataModule's or module's hook), the module placed, weights loaded."""
        t, s, strategy = self.trainer, self.settings, self.trainer.strategy
        configure_model(t, model)  # right after `setup`, as in Lightning; before weights are loaded
        if ckpt_path is not None:  # first: a DataModule's restored state may decide its loaders
            load_weights(t, ckpt_path, weights_only)
        owner = data_source(t, model)
        source = loaders if loaders is not None else getattr(owner, s.loader_hook)()
        given = as_loader_list(source, f"trainer.{self.stage}(dataloaders=...)")
        dataloaders = [strategy.process_dataloader(dl, self.stage.value) for dl in given]
        if not dataloaders:
            raise ValueError(
                f"No {self.stage} data: pass dataloaders or a datamodule to trainer.{self.stage}(...) or define "
                f"{type(owner).__name__}.{s.loader_hook}()."
            )
        prepare_for_speed(model, t.channels_last, t.compile)
        strategy.setup_module(model)
        counts = [num_batches(dl, getattr(t, s.limit), s.limit_label) for dl in dataloaders]
        if self.stage == Stage.VALIDATE:  # `num_val_batches` (the progress bar's total) reads them
            t.val_dataloaders = dataloaders
        elif self.stage == Stage.TEST:
            t.num_test_batches = counts
            t.test_dataloaders = dataloaders
        else:
            t.num_predict_batches = counts
            t.predict_dataloaders = dataloaders  # a prediction writer reads each batch's indices
        return dataloaders

    def run(self, dataloaders: list[Any]) -> list[Any]:
        """Evaluate; returns one metric dict per loader (or, for predict, the outputs)."""
        t, s = self.trainer, self.settings
        hooks, module = t.hooks, t.module
        t.state.evaluation = self  # errors name this run's batch
        step = self._step_function(module, len(dataloaders))
        transfer = BatchTransfer(t, module)
        modes = {m: m.training for m in module.modules()}  # restored after the run, as Lightning's
        model_eval = module_override(t, module, s.hook("model_eval"))
        model_eval() if model_eval is not None else module.eval()
        self.metrics.reset()
        t.metric_logger.start_evaluation(self.metrics)
        predictions: list[list[Any]] = [[] for _ in dataloaders]
        self._several = len(dataloaders) > 1
        self._first_step = True  # the strategy's `before_evaluation` comes before it
        try:
            with self._grad_mode():
                # as Lightning: the first loader's iterator (its base seed and sampler draws from
                # torch's generator) exists before the stage's first hook
                first = iter(dataloaders[0])
                hooks.call(s.hook("start"))
                hooks.call(s.hook("epoch_start"))
                for dl_idx, loader in enumerate(dataloaders):
                    batches = first if dl_idx == 0 else loader
                    self._run_loader(dl_idx, loader, batches, step, transfer, predictions[dl_idx])
                self.batch_idx = None
                self.metrics.dataloader_suffix = ""
                values = self._end_epoch()
                hooks.call(s.hook("end"))
        finally:
            self._restore_modes(modes)
        if self.stage == Stage.PREDICT:
            if t.world_size > 1 and not lightning_rules():  # under the runner each rank's own, as Lightning's
                predictions = _gather_predictions(t, dataloaders, predictions)
            return predictions[0] if not self._several else predictions
        return _split_by_loader(values, len(dataloaders))

    def _step_function(self, module: ModuleInternals, n_loaders: int) -> Any:
        """The stage's step, timed by the profiler, called with the arguments it takes."""
        t, name = self.trainer, self.settings.step
        step_fn = getattr(module, name)
        if t.profiler.active:
            step_fn = t.profiler.wrap(f"[Module]{type(module).__name__}.{name}", step_fn)
        if n_loaders > 1:
            _check_accepts_dataloader_idx(step_fn, name, n_loaders)
        if takes_batch_idx(step_fn):
            return step_fn
        return lambda batch, *_: step_fn(batch)

    def _run_loader(
        self, dl_idx: int, loader: Any, batches: Any, step: Any, transfer: BatchTransfer, predictions: list[Any]
    ) -> None:
        """Every batch of one loader (``batches``: its iterator or itself), up to the stage's limit."""
        t, s, hooks = self.trainer, self.settings, self.trainer.hooks
        self.metrics.dataloader_suffix = f"/dataloader_idx_{dl_idx}" if self._several else ""
        extra = (dl_idx,) if self._several else ()  # as Lightning: dataloader_idx only with several loaders
        limit_n = self._batches(loader, getattr(t, s.limit))
        batch_start, batch_end = s.hook("batch_start"), s.hook("batch_end")
        seen = 0
        self.dataloader_idx, self.batch_idx = dl_idx, 0
        for batch_idx, batch in enumerate(batches):
            if limit_n is not None and batch_idx >= limit_n:
                break
            seen += 1
            if transfer.moves:
                batch = transfer(batch, dl_idx)
            batch = t.precision_plugin.convert_input(batch)
            self.metrics.set_batch(batch)
            hooks.call(batch_start, batch, batch_idx, *extra)
            if self._first_step:
                self._first_step = False
                t.strategy.before_evaluation()
            with t.precision_plugin.autocast():
                output = step(batch, batch_idx, *extra)
            if self.stage == Stage.PREDICT:
                predictions.append(output)
            hooks.call(batch_end, output, batch, batch_idx, *extra)
            if self.stage in (Stage.VALIDATE, Stage.TEST):  # not the sanity check's, as Lightning
                t.metric_logger.publish_eval_step(self.metrics, t.strategy, dl_idx)
            self.batch_idx = batch_idx + 1  # loading the next one
        if t.world_size > 1 and limit_n is not None and seen < limit_n and has_length(loader):
            # Samples would be missing from the metrics unnoticed, and a step that runs
            # a collective of its own would leave the peers waiting in it.
            raise short_loader_error(s.name, t.global_rank, seen, limit_n)

    def _end_epoch(self) -> dict[str, torch.Tensor]:
        """The epoch-end hooks, then the run's aggregates (published, except the sanity check's)."""
        t, s, strategy = self.trainer, self.settings, self.trainer.strategy
        # under the runner a value is rank-local unless logged with sync_dist, as Lightning's
        sync_all = t.world_size > 1 and not lightning_rules()
        # the epoch-end hooks see the aggregates; the module's may log more
        t.metric_logger.preview_epoch(self.metrics, strategy, sync_all=sync_all)
        if self.stage == Stage.SANITY_CHECK:  # its values are shown until the check ends, never logged
            t.hooks.call(s.hook("epoch_end"))
            return t.metric_logger.finish_unpublished(self.metrics, strategy, sync_all=sync_all)
        t.hooks.call(s.hook("epoch_end"))
        step = self.log_step if self.log_step is not None else t.fit_loop.logged_steps()
        return t.metric_logger.publish_epoch(self.metrics, strategy, step, t.current_epoch, sync_all=sync_all)

    def _restore_modes(self, modes: dict[torch.nn.Module, bool]) -> None:
        """The module's ``on_*_model_train`` if overridden, else every submodule's mode as it was."""
        t, s = self.trainer, self.settings
        model_train = module_override(t, t.module, s.model_train) if s.model_train else None
        if model_train is not None:
            model_train()
        else:
            for m, training in modes.items():
                m.training = training

    def position(self) -> str:
        """The dataloader (when several) and batch being loaded or run, for error messages."""
        if self.batch_idx is None:
            return ""
        loader = f", dataloader index {self.dataloader_idx}" if self._several else ""
        return f"{loader}, batch index {self.batch_idx}"

    def _grad_mode(self) -> Any:
        """``torch.inference_mode`` when ``Trainer(inference_mode=True)``, else ``no_grad``. As in
        Lightning, ``no_grad`` inside fit (training goes on with the tensors), and under gloo and
        FSDP, where inference tensors do not work."""
        dist = torch.distributed
        gloo = dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo"
        inference = self.trainer.config.loop.inference_mode and not self.within_fit
        if inference and not gloo and self.trainer.strategy.name != "fsdp":
            return torch.inference_mode()
        return torch.no_grad()

    def _batches(self, loader: Any, limit: int | float | None) -> int | None:
        n = num_batches(loader, limit, self.settings.limit_label)
        if self.stage == Stage.SANITY_CHECK:
            # the sanity check runs at most num_sanity_val_steps batches, whatever the limit
            return _cap(n, self.trainer.num_sanity_val_steps)
        return n


def _gather_predictions(trainer: Trainer, loaders: list[Any], mine: list[list[Any]]) -> list[list[Any]]:
    """Every rank's predictions on every rank, per loader, rank 0's first (tensors on the CPU).

    The Trainer shards predict loaders in consecutive blocks, so rank order is dataset order and
    every sample appears once; a loader it did not shard keeps its own sampler's order.
    """
    from trainer.accelerators.accelerator import move_to_device

    per_rank = trainer.strategy.all_gather_object(move_to_device(mine, torch.device("cpu")))
    foreign = [i for i, dl in enumerate(loaders) if not _in_consecutive_blocks(dl)]
    if foreign:
        from trainer.distributed.rank_zero import rank_zero_warn

        rank_zero_warn(
            f"predict: dataloader(s) {foreign} were not sharded by the Trainer (a sampler of "
            "yours, an IterableDataset or use_distributed_sampler=False), so their predictions "
            f"are returned rank by rank (rank 0's first), not in dataset order, and a sample that "
            "your sampler gives several ranks appears several times.",
            stacklevel=user_stacklevel(),
        )
    return [[out for rank_outputs in per_rank for out in rank_outputs[i]] for i in range(len(loaders))]


def _in_consecutive_blocks(loader: Any) -> bool:
    from trainer.data.distributed_sampler import UnpaddedDistributedSampler

    batch_sampler = getattr(loader, "batch_sampler", None)
    return any(
        isinstance(s, UnpaddedDistributedSampler) and s.contiguous
        for s in (getattr(loader, "sampler", None), getattr(batch_sampler, "sampler", None))
    )


def _cap(n: int | None, cap: int) -> int:
    """``min`` where ``None`` means unbounded; ``cap=-1`` means no cap."""
    if cap == -1:
        return n if n is not None else 2**62
    return cap if n is None else min(n, cap)


def _check_accepts_dataloader_idx(step_fn: Any, name: str, n: int) -> None:
    try:
        inspect.signature(step_fn).bind(None, 0, 0)
    except TypeError:
        raise TypeError(
            f"{name} is called with (batch, batch_idx, dataloader_idx) when there are several "
            f"dataloaders ({n} here); add a `dataloader_idx=0` parameter to it."
        ) from None


def _split_by_loader(values: dict[str, torch.Tensor], n: int) -> list[dict[str, float]]:
    results: list[dict[str, float]] = [{} for _ in range(n)]
    for key, value in values.items():
        number = float(value)
        if "/dataloader_idx_" in key:
            idx = int(key.rsplit("_", 1)[1])
            results[idx][key] = number
        else:
            for r in results:
                r[key] = number
    return results
