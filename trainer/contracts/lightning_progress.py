"""Lightning's loop progress in a checkpoint (``loops.fit_loop``), read and written.

Lightning does not store where a fit stands as a position: it stores the counters of its loops
(``epoch_progress``, ``epoch_loop.batch_progress``, the optimizers' step counts...), each with
``ready``/``started``/``processed``/``completed`` stages, and decides on restart from which stages
differ where the checkpoint was written (lightning/pytorch/loops/fit_loop.py and
training_epoch_loop.py, ``update_restart_stage`` and ``reset``). `position_from_lightning` reads
that decision back as Lockstep's position; `lightning_fit_loop` writes a position as the counters
Lightning writes at the same point, so Lightning's restart logic lands where Lockstep resumes.
"""
from __future__ import annotations

from typing import Mapping, SupportsInt

# the entries of Lightning's ``loops.fit_loop`` that say where the fit stands
EPOCH_PROGRESS = "epoch_progress"
BATCH_PROGRESS = "epoch_loop.batch_progress"
OPTIM_PROGRESS = "epoch_loop.automatic_optimization.optim_progress"
MANUAL_PROGRESS = "epoch_loop.manual_optimization.optim_step_progress"
EPOCH_LOOP_STATE = "epoch_loop.state_dict"


def is_lightning_fit_loop(fit_loop: Mapping[str, object]) -> bool:
    """Whether ``fit_loop`` holds only Lightning's counters (a file Lightning wrote), not Lockstep's position."""
    return "batches_done" not in fit_loop and EPOCH_PROGRESS in fit_loop


def position_from_lightning(fit_loop: Mapping[str, object]) -> tuple[int, dict[str, object]]:
    """The epoch where Lightning's own resume of a checkpoint with these counters continues, and
    the position in it as `FitProgress.state_dict` writes one (``batches_done``,
    ``epoch_finished``, ``batches_total``).

    An epoch whose ``processed`` count equals its ``started`` count is not under way (the file
    was written after its end hooks, after ``max_steps`` ended it, or before it started): the
    fit continues at the start of epoch ``processed``. Otherwise epoch ``processed`` was
    interrupted after its ``completed`` batches, one more when the file was written in
    ``on_train_batch_end`` (that batch's ``completed`` stage is not counted yet); at its last
    batch the epoch is over.
    """
    epochs = entry(entry(fit_loop, EPOCH_PROGRESS, required=True), "current")
    batches = entry(fit_loop, BATCH_PROGRESS)
    current, total = entry(batches, "current"), entry(batches, "total")
    at_batch_end = 1 if count(total, "completed") == count(total, "processed") - 1 else 0
    trained = count(total, "completed") + at_batch_end
    epoch = count(epochs, "processed")
    if count(epochs, "started") == epoch:
        return epoch, {"batches_done": 0, "epoch_finished": False, "batches_total": trained}
    done = count(current, "completed") + at_batch_end
    finished = bool(batches.get("is_last_batch", False)) and done > 0
    return epoch, {"batches_done": done, "epoch_finished": finished, "batches_total": trained}


def lightning_fit_loop(
    epoch: int, global_step: int, batches_done: int, epoch_finished: bool, batches_total: int
) -> dict[str, object]:
    """Lightning's counters for a fit at this position, as Lightning writes them at the same point:
    at an epoch's start (none of it trained), in its end hooks (``epoch_finished``), or in
    ``on_train_batch_end`` of batch ``batches_done - 1``."""
    mid_epoch = batches_done > 0 and not epoch_finished
    # Lightning counts an epoch `processed` when its batches are done, `completed` after its end hooks
    processed = epoch + (1 if epoch_finished else 0)
    epochs = {"ready": processed + (1 if mid_epoch else 0), "completed": epoch}
    epochs.update(started=epochs["ready"], processed=processed)
    # in on_train_batch_end the batch is processed, not yet completed
    unfinished = 1 if mid_epoch else 0
    current = _stages(batches_done, batches_done - unfinished)
    total = _stages(batches_total, batches_total - unfinished)
    steps = {"ready": global_step, "completed": global_step}
    return {
        EPOCH_PROGRESS: {"current": epochs, "total": dict(epochs)},
        BATCH_PROGRESS: {"current": current, "total": total, "is_last_batch": epoch_finished},
        OPTIM_PROGRESS: {"optimizer": {
            "step": {"current": dict(steps), "total": dict(steps)},
            "zero_grad": {"current": {**steps, "started": global_step}, "total": {**steps, "started": global_step}},
        }},
        MANUAL_PROGRESS: {"current": dict(steps), "total": dict(steps)},
        # the logger's step; Lightning adds the one a batch-end checkpoint has not counted yet
        EPOCH_LOOP_STATE: {"_batches_that_stepped": max(0, global_step - unfinished)},
    }


def entry(state: Mapping[str, object], key: str, required: bool = False) -> Mapping[str, object]:
    """The nested entry ``state[key]`` of a loaded checkpoint (empty when absent or None, unless
    ``required``): the file is read, so its shape is checked here rather than assumed."""
    value = state[key] if required else state.get(key)
    if not required and value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"checkpoint entry {key!r} must be a mapping, got {type(value).__name__}")
    return value


def count(state: Mapping[str, object], key: str, required: bool = False) -> int:
    """The int ``state[key]`` of a loaded checkpoint (0 when absent, unless ``required``)."""
    value = state[key] if required else state.get(key, 0)
    if not isinstance(value, (SupportsInt, str)):
        raise TypeError(f"checkpoint entry {key!r} must be a number, got {type(value).__name__}")
    return int(value)


def _stages(processed: int, completed: int) -> dict[str, int]:
    return {"ready": processed, "started": processed, "processed": processed, "completed": completed}
