"""`FSDPStrategy`: fully sharded data parallelism with torch's FSDP2 (``fully_shard``).

Every rank holds 1/W of each parameter, of its gradient and of its optimizer state (DTensor
shards). Sharded blocks gather their parameters just before their forward and backward and
free them afterwards; gradients are reduce-scattered to their owners at the end of a window's
last backward. Non-final micro batches of an accumulation window skip that reduction
(``set_requires_gradient_sync(False)``), so a window costs one reduce-scatter, as under DDP.
"""
from __future__ import annotations

import datetime
from typing import Any, Callable, ContextManager, Iterable, Union

import torch.distributed as dist
from torch import nn

from trainer.arguments import check_bool
from trainer.checkpointing import distributed_checkpoint as sharded
from trainer.distributed.process_group import DEFAULT_TIMEOUT, ProcessGroupStrategy
from trainer.strategies.strategy import NO_CONTEXT

ShardPolicy = Union[Iterable[type], Callable[[nn.Module], bool], None]

# The module methods that run a forward on the sharded model: each must gather the root's
# parameters first, as ``forward`` does.
_STEP_METHODS = ("training_step", "validation_step", "test_step", "predict_step")


def _fsdp2() -> Any:
    try:
        from torch.distributed import fsdp
    except ImportError:  # pragma: no cover - torch without distributed
        fsdp = None
    if fsdp is None or not hasattr(fsdp, "fully_shard"):
        import torch

        raise RuntimeError(
            f"strategy='fsdp' needs torch.distributed.fsdp.fully_shard (FSDP2, torch >= 2.6); this is "
            f"torch {torch.__version__}. Upgrade torch, or use strategy='ddp'."
        )
    return fsdp


def _shard_predicate(policy: ShardPolicy) -> Callable[[nn.Module], bool]:
    if policy is None:
        return lambda module: False
    if callable(policy) and not isinstance(policy, type):
        return policy
    if isinstance(policy, type):
        classes: tuple[type, ...] = (policy,)
    else:
        classes = tuple(policy)
    bad = [c for c in classes if not (isinstance(c, type) and issubclass(c, nn.Module))]
    if bad:
        raise TypeError(
            "FSDPStrategy(auto_wrap_policy=...) takes a set of nn.Module classes or a callable "
            f"module -> bool; got {bad[0]!r} in it."
        )
    return lambda module: isinstance(module, classes)


class FSDPStrategy(ProcessGroupStrategy):
    """Shard parameters, gradients and optimizer state over the ranks with FSDP2.

    Args:
        auto_wrap_policy: which sub-modules become their own FSDP unit (gathered and freed on
            their own): a set of module classes (e.g. ``{TransformerBlock}``) or a callable
            ``module -> bool``. The root module is always sharded last and holds the rest.
        reshard_after_forward: free a unit's gathered parameters after its forward (less memory,
            one more all-gather in backward); ``False`` keeps them until the backward.
        timeout: how long a collective may wait for the other ranks (seconds or a ``timedelta``),
            as for every distributed strategy.
        process_group_backend: ``"nccl"`` on CUDA and ``"gloo"`` on CPU unless given.
        async_checkpoint: write checkpoints in a background thread (``torch.distributed.checkpoint.async_save``):
            training continues once the shards are copied to host memory; the next save and the
            end of the run wait for it (docs/checkpointing.md).
    """

    name = "fsdp"

    def __init__(
        self,
        auto_wrap_policy: ShardPolicy = None,
        reshard_after_forward: bool = True,
        timeout: datetime.timedelta | float = DEFAULT_TIMEOUT,
        process_group_backend: str | None = None,
        async_checkpoint: bool = False,
    ) -> None:
        check_bool("reshard_after_forward", reshard_after_forward)
        check_bool("async_checkpoint", async_checkpoint)
        self.async_checkpoint = async_checkpoint
        super().__init__(timeout=timeout, process_group_backend=process_group_backend)
        self._should_shard = _shard_predicate(auto_wrap_policy)
        self.reshard_after_forward = reshard_after_forward
        self._syncing = True  # what the root's gradient sync is set to now

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Move to the device and shard: the policy's units first (innermost first), then the root."""
        fsdp = _fsdp2()
        module = self._prepare_module(module)
        kwargs = {"reshard_after_forward": self.reshard_after_forward}
        for sub in reversed(list(module.modules())):  # children before their parents
            if sub is not module and self._should_shard(sub):
                fsdp.fully_shard(sub, **kwargs)
        fsdp.fully_shard(module, **kwargs)
        for method in _STEP_METHODS:
            if callable(getattr(module, method, None)):
                fsdp.register_fsdp_forward_method(module, method)
        self.model = module
        self._syncing = True
        return module

    def no_sync(self, sync: bool) -> ContextManager[Any]:
        """Skip the gradient reduce-scatter for micro batches that do not end a window."""
        if self.model is not None and sync != self._syncing:
            self.model.set_requires_gradient_sync(sync)  # type: ignore[operator]
            self._syncing = sync
        return NO_CONTEXT

    # -- checkpoints: one directory of every rank's shards (trainer/checkpointing/distributed_checkpoint.py)
    _pending_save: sharded.PendingSave | None = None
    _checkpoint_group: Any = None  # the asynchronous saves' own group: never the training collectives'

    def module_state(self, module: nn.Module) -> dict[str, Any]:
        """This rank's shards of the module's state (DTensors)."""
        return sharded.sharded_module_state(module)

    def optimizer_state(self, optimizer: Any) -> dict[str, Any]:
        """This rank's shards of the optimizer's state, keyed by parameter name."""
        assert self.model is not None
        return sharded.sharded_optimizer_state(self.model, optimizer)

    def load_module_state(self, module: nn.Module, state: Any) -> None:
        """Read a sharded (or full) module state into this rank's shards: any saved world size."""
        sharded.load_module_state(module, state)

    def load_optimizer_state(self, optimizer: Any, state: Any) -> None:
        """Read a sharded (or full) optimizer state into this rank's shards: any saved world size."""
        assert self.model is not None
        sharded.load_optimizer_state(self.model, optimizer, state)

    def write_checkpoint(self, checkpoint: dict[str, Any], path: str, alone: bool = False) -> None:
        """Every rank writes its shards into the directory ``path``, published complete or not at all."""
        if alone:
            sharded.warn_unsaved(path)
            return
        if not self.in_group:
            raise RuntimeError(
                f"FSDPStrategy cannot write {path!r} now: every rank writes its own shards, inside the "
                "process group, which exists only during fit/validate/test/predict. Save from a callback "
                "or with ModelCheckpoint during fit."
            )
        self.wait_for_checkpoint()
        if self.async_checkpoint and self._checkpoint_group is None:
            self._checkpoint_group = dist.new_group(backend="gloo", timeout=self.timeout)
        self._pending_save = sharded.save_sharded(
            checkpoint, path, self.global_rank, self._checkpoint_group, self.async_checkpoint
        )
        if not self.async_checkpoint:
            self.barrier("save_checkpoint")

    def read_checkpoint(self, path: str, weights_only: bool = True) -> dict[str, Any]:
        """A sharded directory's position and states, its tensors read later into this rank's shards."""
        if sharded.is_sharded_checkpoint(path):
            return sharded.read_sharded(path, weights_only)
        return super().read_checkpoint(path, weights_only)

    def wait_for_checkpoint(self) -> None:
        """Block until the asynchronous save in flight (if any) is complete and published."""
        pending, self._pending_save = self._pending_save, None
        if pending is not None:
            pending.wait()

    def teardown(self) -> None:
        """Wait for a save in flight, then leave the process group."""
        try:
            self.wait_for_checkpoint()
        finally:
            self._checkpoint_group = None
            super().teardown()
