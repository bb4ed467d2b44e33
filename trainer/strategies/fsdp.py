"""`FSDPStrategy`: fully sharded data parallelism with torch's FSDP2 (``fully_shard``).

Every rank holds 1/W of each parameter, of its gradient and of its optimizer state (DTensor
shards). Sharded blocks gather their parameters just before their forward and backward and
free them afterwards; gradients are reduce-scattered to their owners at the end of a window's
last backward. Non-final micro batches of an accumulation window skip that reduction
(``set_requires_gradient_sync(False)``), so a window costs one reduce-scatter, as under DDP.

Layers that ``configure_model`` builds are created on the meta device (no memory) and
materialized after sharding, one module at a time: a rank allocates its shards and, while a
module is initialized, that one module's full parameters. See docs/fsdp.md.
"""
from __future__ import annotations

import contextlib
import datetime
import math
from typing import Any, Callable, ContextManager, Iterable, Iterator, Union

import torch
import torch.distributed as dist
from torch import nn

from trainer.accelerators.accelerator import Accelerator
from trainer.contracts.arguments import check_bool
from trainer.checkpoint_io import fsdp_state
from trainer.checkpoint_io.sharded_layout import is_sharded_checkpoint
from trainer.checkpoint_io.sharded_read import read_sharded
from trainer.checkpoint_io.sharded_save import PendingSave, save_sharded, warn_unsaved
from trainer.strategies.process_group import DEFAULT_TIMEOUT, ProcessGroupStrategy
from trainer.rng import share_torch_rng_state
from trainer.strategies.strategy import NO_CONTEXT

ShardPolicy = Union[Iterable[type], Callable[[nn.Module], bool], None]

# The module methods that run a forward on the sharded model: each must gather the root's
# parameters first, as ``forward`` does.
_STEP_METHODS = ("training_step", "validation_step", "test_step", "predict_step")


def _fsdp2() -> Any:
    try:
        from torch.distributed import fsdp
    except ImportError:  # pragma: no cover - torch without distributed
        fsdp = None  # type: ignore[assignment]  # the test below names what is missing
    if fsdp is None or not hasattr(fsdp, "fully_shard"):
        raise RuntimeError(
            f"strategy='fsdp' needs torch.distributed.fsdp.fully_shard (FSDP2, torch >= 2.6); this is "
            f"torch {torch.__version__}. Upgrade torch, or use strategy='ddp'."
        )
    return fsdp


def _shard_predicate(name: str, policy: ShardPolicy) -> Callable[[nn.Module], bool]:
    if policy is None:
        return lambda module: False
    if callable(policy) and not isinstance(policy, type):
        return policy
    if isinstance(policy, type):
        classes: tuple[type, ...] = (policy,)
    elif isinstance(policy, (str, bytes)) or not isinstance(policy, Iterable):
        raise TypeError(
            f"FSDPStrategy({name}=...) takes a set of nn.Module classes or a callable module -> bool; "
            f"got {policy!r}."
        )
    else:
        classes = tuple(policy)
    bad = [c for c in classes if not (isinstance(c, type) and issubclass(c, nn.Module))]
    if bad:
        raise TypeError(
            f"FSDPStrategy({name}=...) takes a set of nn.Module classes or a callable "
            f"module -> bool; got {bad[0]!r} in it."
        )
    return lambda module: isinstance(module, classes)


def _check_mesh(device_mesh: Any) -> None:
    from torch.distributed.device_mesh import DeviceMesh

    if device_mesh is None or isinstance(device_mesh, DeviceMesh):
        return
    ok = (
        isinstance(device_mesh, tuple)
        and len(device_mesh) in (1, 2)
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in device_mesh)
    )
    if not ok:
        raise TypeError(
            "FSDPStrategy(device_mesh=...) takes a DeviceMesh, a tuple (world_size,), or a tuple "
            f"(replicas, shards) for hybrid sharding (HSDP); got {device_mesh!r}."
        )


def _own_tensors(module: nn.Module) -> list[torch.Tensor]:
    return [*module.parameters(recurse=False), *module.buffers(recurse=False)]


def _named_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [*module.named_parameters(), *module.named_buffers()]


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (a view of its memory), or the tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def _local_part(full: torch.Tensor, like: Any) -> torch.Tensor:
    """This rank's part of ``full`` as DTensor ``like`` places it (``torch.chunk`` per sharded mesh dim)."""
    local = full
    for mesh_dim, placement in enumerate(like.placements):
        if placement.is_shard():
            chunks = torch.chunk(local, like.device_mesh.size(mesh_dim), dim=placement.dim)
            rank = like.device_mesh.get_local_rank(mesh_dim)
            local = chunks[rank] if rank < len(chunks) else local.narrow(placement.dim, 0, 0)
    return local


class FSDPStrategy(ProcessGroupStrategy):
    """Shard parameters, gradients and optimizer state over the ranks with FSDP2.

    Args:
        auto_wrap_policy: which sub-modules become their own FSDP unit (gathered and freed on
            their own): a set of module classes (e.g. ``{TransformerBlock}``) or a callable
            ``module -> bool``. The root module is always sharded last and holds the rest.
        reshard_after_forward: free a unit's gathered parameters after its forward (less memory,
            one more all-gather in backward); ``False`` keeps them until the backward.
        activation_checkpointing_policy: sub-modules whose activations are recomputed in the
            backward instead of stored: a set of classes, a callable, or ``True`` for the
            `auto_wrap_policy` units.
        cpu_offload: keep the sharded parameters, their gradients and the optimizer state in CPU
            memory (the optimizer steps on the CPU); units are copied to the device to compute.
        device_mesh: ``None`` (all ranks shard, 1-D), a ``(replicas, shards)`` tuple for hybrid
            sharding (HSDP: shard within groups of ``shards`` ranks, replicate across them), or
            a ``DeviceMesh`` of your own.
        timeout: how long a collective may wait for the other ranks (seconds or a ``timedelta``),
            as for every distributed strategy.
        process_group_backend: ``"nccl"`` on CUDA and ``"gloo"`` on CPU unless given.
        async_checkpoint: write checkpoints in a background thread (``torch.distributed.checkpoint.async_save``):
            training continues once the shards are copied to host memory; the next save and the
            end of the run wait for it (docs/checkpointing.md).

    The Trainer's ``precision`` decides the dtypes: ``"bf16-mixed"`` gathers parameters in bf16
    and reduce-scatters gradients in fp32 (the shards and the optimizer stay fp32; autocast
    stays on), ``"bf16-true"`` keeps everything in bf16, ``"16-mixed"`` is refused.
    """

    name = "fsdp"

    def __init__(
        self,
        auto_wrap_policy: ShardPolicy = None,
        reshard_after_forward: bool = True,
        activation_checkpointing_policy: ShardPolicy | bool = None,
        cpu_offload: bool = False,
        device_mesh: Any = None,
        timeout: datetime.timedelta | float = DEFAULT_TIMEOUT,
        process_group_backend: str | None = None,
        async_checkpoint: bool = False,
        accelerator: str | Accelerator | None = None,
    ) -> None:
        check_bool("reshard_after_forward", reshard_after_forward)
        check_bool("cpu_offload", cpu_offload)
        check_bool("async_checkpoint", async_checkpoint)
        _check_mesh(device_mesh)
        self.async_checkpoint = async_checkpoint
        super().__init__(timeout=timeout, process_group_backend=process_group_backend, accelerator=accelerator)
        self._should_shard = _shard_predicate("auto_wrap_policy", auto_wrap_policy)
        if activation_checkpointing_policy is True:
            if auto_wrap_policy is None:
                raise ValueError(
                    "FSDPStrategy(activation_checkpointing_policy=True) checkpoints the sharded "
                    "blocks, but no auto_wrap_policy names them: pass auto_wrap_policy, or a set of "
                    "classes / a callable as activation_checkpointing_policy."
                )
            self._should_checkpoint = self._should_shard
        elif activation_checkpointing_policy is False:
            self._should_checkpoint = _shard_predicate("activation_checkpointing_policy", None)
        else:
            self._should_checkpoint = _shard_predicate("activation_checkpointing_policy", activation_checkpointing_policy)
        self.reshard_after_forward = reshard_after_forward
        self.cpu_offload = cpu_offload
        self.device_mesh = device_mesh
        self._syncing = True  # what the root's gradient sync is set to now

    def connect(self, accelerator: Any, cluster_environment: Any, **kwargs: Any) -> None:
        """As every strategy's; refuses fp16 loss scaling, which needs every shard's overflow check."""
        if kwargs.get("precision") == "16-mixed":
            raise ValueError(
                "precision='16-mixed' is not supported with strategy='fsdp': fp16 loss scaling would "
                "have to agree on overflows across every rank's gradient shards. Use "
                "precision='bf16-mixed' or 'bf16-true'."
            )
        super().connect(accelerator, cluster_environment, **kwargs)

    def module_init_context(self) -> ContextManager[Any]:
        """``configure_model`` builds on the meta device: no memory until each rank's shards exist."""
        return torch.device("meta")

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Shard: the policy's units first (innermost first), then the root; then materialize
        what was built on the meta device."""
        fsdp = _fsdp2()
        if isinstance(module, fsdp.FSDPModule):
            raise RuntimeError(
                f"This {type(module).__name__} was sharded by FSDP in an earlier trainer run, whose "
                "process group ended with it, so its shards cannot be gathered again. Build a new "
                "module for each fit/validate/test/predict (load weights with ckpt_path=...), or "
                "evaluate inside fit (val_dataloaders). See docs/fsdp.md."
            )
        on_meta = any(t.is_meta for t in [*module.parameters(), *module.buffers()])
        module = self._prepare_module(module, move=False)  # fully_shard moves what is not on meta
        self._agree_on_weights(module, on_meta)
        kwargs = self._shard_arguments(fsdp)
        children_first = [sub for sub in reversed(list(module.modules())) if sub is not module]
        self._apply_activation_checkpointing(children_first)
        for sub in children_first:
            if self._should_shard(sub):
                fsdp.fully_shard(sub, **kwargs)
        fsdp.fully_shard(module, **kwargs)
        if on_meta:
            self._materialize(module)
        for method in _STEP_METHODS:
            if callable(getattr(module, method, None)):
                fsdp.register_fsdp_forward_method(module, method)
        self.model = module
        self._syncing = True
        return module

    def _shard_arguments(self, fsdp: Any) -> dict[str, Any]:
        """``fully_shard``'s arguments: the mesh, resharding, mixed precision, CPU offload."""
        kwargs: dict[str, Any] = {"mesh": self._mesh(), "reshard_after_forward": self.reshard_after_forward}
        if self.precision == "bf16-mixed":
            kwargs["mp_policy"] = fsdp.MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if self.cpu_offload:
            kwargs["offload_policy"] = fsdp.CPUOffloadPolicy(pin_memory=self.root_device.type == "cuda")
        return kwargs

    def _apply_activation_checkpointing(self, children_first: list[nn.Module]) -> None:
        chosen = [sub for sub in children_first if self._should_checkpoint(sub)]
        if chosen:
            from torch.distributed._composable import checkpoint

            for sub in chosen:
                checkpoint(sub)

    def _mesh(self) -> Any:
        from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

        mesh = self.device_mesh
        if isinstance(mesh, DeviceMesh):
            if mesh.size() != self.world_size:
                raise ValueError(f"FSDPStrategy(device_mesh=...) spans {mesh.size()} ranks, but the run has {self.world_size}.")
            return mesh
        shape = mesh or (self.world_size,)
        if math.prod(shape) != self.world_size:
            raise ValueError(
                f"FSDPStrategy(device_mesh={shape}) needs {math.prod(shape)} ranks, but the run has {self.world_size}."
            )
        names = ("shard",) if len(shape) == 1 else ("replicate", "shard")
        return init_device_mesh(self.root_device.type, shape, mesh_dim_names=names)

    def _agree_on_weights(self, module: nn.Module, on_meta: bool) -> None:
        """Rank 0's initial weights everywhere, so every rank shards the same model (as DDP
        broadcasts rank 0's weights); with meta layers also rank 0's RNG state, so every rank
        materializes them with the same numbers."""
        if self.world_size == 1:
            return
        with torch.no_grad():
            for tensor in [*module.parameters(), *module.buffers()]:
                if not tensor.is_meta:
                    group = self.control_group if tensor.device.type == "cpu" else None
                    dist.broadcast(tensor, src=0, group=group)
        if not on_meta:
            return
        share_torch_rng_state(self.broadcast, self.root_device)

    @torch.no_grad()
    def _materialize(self, module: nn.Module) -> None:
        """Give the meta tensors memory (each rank its shards) and initialize them as building
        the model eagerly would: each module's ``reset_parameters()``, in registration order,
        with the RNG where ``configure_model`` found it. A module's full parameters exist only
        while that module is initialized; their shard is kept."""
        pending = [sub for sub in module.modules() if any(t.is_meta for t in _own_tensors(sub))]
        bad = [sub for sub in pending if not callable(getattr(sub, "reset_parameters", None))]
        if bad:
            raise TypeError(
                f"{type(bad[0]).__name__} was built on the meta device (in configure_model) but has no "
                "reset_parameters() to initialize its parameters and buffers once they are sharded. "
                "Define reset_parameters() on it, or build it in __init__."
            )
        # to_empty gives every tensor new memory: keep (this rank's part of) those not on meta
        kept = {name: _local(t).clone() for name, t in _named_tensors(module) if not t.is_meta}
        module.to_empty(device="cpu" if self.cpu_offload else self.root_device)
        for name, tensor in _named_tensors(module):
            if name in kept:
                _local(tensor).copy_(kept.pop(name))
        for sub in pending:
            sharded = dict(sub.named_parameters(recurse=False))
            for name, param in sharded.items():
                setattr(sub, name, nn.Parameter(torch.empty(param.shape, dtype=param.dtype, device=self.root_device)))
            sub.reset_parameters()  # type: ignore[operator]
            for name, param in sharded.items():
                full = getattr(sub, name)
                # fully_shard made each parameter a DTensor; torch types it a Parameter still
                param.to_local().copy_(_local_part(full, param))  # type: ignore[attr-defined]
                setattr(sub, name, param)

    def sync_gradients(self) -> None:
        """Nothing to do: FSDP reduce-scatters in every backward outside `block_backward_sync`."""

    @contextlib.contextmanager
    def block_backward_sync(self) -> Iterator[None]:
        """Manual optimization: backward passes inside keep full local gradients (no reduce-scatter);
        the next synced backward reduce-scatters their sum."""
        try:
            with super().block_backward_sync():
                self.no_sync(False)
                yield
        finally:
            if not self.backward_sync_blocked:
                self.no_sync(True)

    def no_sync(self, sync: bool) -> ContextManager[Any]:
        """Skip the gradient reduce-scatter for micro batches that do not end a window."""
        if self.model is not None and sync != self._syncing:
            self.model.set_requires_gradient_sync(sync)  # type: ignore[operator]
            self._syncing = sync
        return NO_CONTEXT

    # -- checkpoints: one directory of every rank's shards (trainer/checkpoint_io/)
    _pending_save: PendingSave | None = None
    _checkpoint_group: Any = None  # the asynchronous saves' own group: never the training collectives'

    def module_state(self, module: nn.Module) -> dict[str, Any]:
        """This rank's shards of the module's state (DTensors)."""
        return fsdp_state.sharded_module_state(module)

    def optimizer_state(self, optimizer: Any) -> dict[str, Any]:
        """This rank's shards of the optimizer's state, keyed by parameter name."""
        assert self.model is not None
        return fsdp_state.sharded_optimizer_state(self.model, optimizer)

    def load_module_state(self, module: nn.Module, state: Any) -> None:
        """Read a sharded (or full) module state into this rank's shards: any saved world size."""
        fsdp_state.load_module_state(module, state)

    def load_optimizer_state(self, optimizer: Any, state: Any) -> None:
        """Read a sharded (or full) optimizer state into this rank's shards: any saved world size."""
        assert self.model is not None
        fsdp_state.load_optimizer_state(self.model, optimizer, state)

    def write_checkpoint(self, checkpoint: dict[str, Any], path: str, alone: bool = False) -> None:
        """Every rank writes its shards into the directory ``path``, published complete or not at all."""
        if alone:
            warn_unsaved(path)
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
        self._pending_save = save_sharded(
            checkpoint, path, self.global_rank, self._checkpoint_group, self.async_checkpoint
        )
        if not self.async_checkpoint:
            self.barrier("save_checkpoint")

    def read_checkpoint(self, path: str, weights_only: bool = True) -> dict[str, Any]:
        """A sharded directory's position and states, its tensors read later into this rank's shards."""
        if is_sharded_checkpoint(path):
            return read_sharded(path, weights_only)
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
