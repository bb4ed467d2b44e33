"""`DDPStrategy`: torch's DistributedDataParallel, with accumulation windows under ``no_sync``."""
from __future__ import annotations

import inspect
import datetime
from typing import Any, Callable, ContextManager

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainer.contracts.arguments import check_bool, check_number
from trainer.strategies.process_group import DEFAULT_TIMEOUT, ProcessGroupStrategy
from trainer.strategies.strategy import NO_CONTEXT


# torch 2.14 renamed `broadcast_buffers` (buffers synced from rank 0 before each forward).
_BUFFER_SYNC_ARG = (
    "forward_sync_buffers"
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
    else "broadcast_buffers"
)


# Names accepted for ``ddp_comm_hook`` (torch's built-in hooks). All three run on gloo (CPU) and
# NCCL; ``bf16_compress`` on NCCL needs a CUDA build with bf16 all-reduce support.
COMM_HOOKS = ("fp16_compress", "bf16_compress", "powersgd")


def resolve_comm_hook(hook: str | Callable[..., Any], state: Any) -> tuple[Any, Callable[..., Any]]:
    """``(state, hook)`` for ``DistributedDataParallel.register_comm_hook``.

    A name from `COMM_HOOKS` maps to torch's hook in ``torch.distributed.algorithms.ddp_comm_hooks``;
    ``"powersgd"`` without a state gets a fresh ``PowerSGDState`` with torch's defaults (rank-1
    approximation, plain all-reduce for the first 1000 steps, error feedback). A callable is
    used as is, with ``state``.
    """
    if callable(hook):
        return state, hook
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if hook == "fp16_compress":
        return state, default_hooks.fp16_compress_hook
    if hook == "bf16_compress":
        return state, default_hooks.bf16_compress_hook
    if hook == "powersgd":
        if state is None:  # a new state per wrapper: its error feedback belongs to one model
            state = powerSGD_hook.PowerSGDState(process_group=None)
        return state, powerSGD_hook.powerSGD_hook
    raise ValueError(f"ddp_comm_hook must be one of {COMM_HOOKS} or a callable, got {hook!r}")


class _StepForward(nn.Module):
    """Routes DDP's ``forward`` to ``training_step`` so DDP's reducer sees the step's graph."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args: Any) -> Any:
        return self.module.training_step(*args)


class DDPStrategy(ProcessGroupStrategy):
    """Data parallel training with ``torch.nn.parallel.DistributedDataParallel``.

    The keyword arguments go straight to ``DistributedDataParallel``. Non-final micro batches of
    an accumulation window run forward and backward inside ``no_sync()``, so gradients are
    all-reduced once per optimizer step.

    ``ddp_comm_hook`` changes how gradients are communicated: ``"fp16_compress"`` /
    ``"bf16_compress"`` (all-reduce in half precision: half the bytes), ``"powersgd"`` (low-rank
    compression, `PowerSGDState` in ``ddp_comm_state`` or torch's defaults), or a callable
    ``hook(state, bucket) -> Future`` registered with ``ddp_comm_state``. ``static_graph=True``
    tells DDP the set of used parameters never changes, which lets it skip per-step bookkeeping.
    """

    name = "ddp"

    def __init__(
        self,
        bucket_cap_mb: float = 25,
        gradient_as_bucket_view: bool = True,
        find_unused_parameters: bool = False,
        static_graph: bool = False,
        broadcast_buffers: bool = True,
        timeout: datetime.timedelta | float = DEFAULT_TIMEOUT,
        process_group_backend: str | None = None,
        ddp_comm_hook: str | Callable[..., Any] | None = None,
        ddp_comm_state: Any = None,
    ) -> None:
        if ddp_comm_hook is not None and not callable(ddp_comm_hook):
            bad_hook = f"ddp_comm_hook must be one of {COMM_HOOKS} or a callable, got {ddp_comm_hook!r}"
            if not isinstance(ddp_comm_hook, str):
                raise TypeError(bad_hook)
            if ddp_comm_hook not in COMM_HOOKS:
                raise ValueError(bad_hook)
        # DDP reads these with `if`: a truthy "no" would silently switch them on
        check_bool("gradient_as_bucket_view", gradient_as_bucket_view)
        check_bool("find_unused_parameters", find_unused_parameters)
        check_bool("static_graph", static_graph)
        check_bool("broadcast_buffers", broadcast_buffers)
        check_number("bucket_cap_mb", bucket_cap_mb, minimum=0)
        super().__init__(timeout=timeout, process_group_backend=process_group_backend)
        self.ddp_kwargs = {
            "bucket_cap_mb": bucket_cap_mb,
            "gradient_as_bucket_view": gradient_as_bucket_view,
            "find_unused_parameters": find_unused_parameters,
            "static_graph": static_graph,
            _BUFFER_SYNC_ARG: broadcast_buffers,
        }
        self.ddp_comm_hook = ddp_comm_hook
        self.ddp_comm_state = ddp_comm_state
        self._first_backward = True  # of the current DDP wrapper

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Move to the device, convert BatchNorm if asked, wrap in DDP."""
        module = self._prepare_module(module)
        device = self.root_device
        ddp = DistributedDataParallel(
            _StepForward(module),
            device_ids=[device.index] if device.type == "cuda" else None,
            **self.ddp_kwargs,
        )
        if self.ddp_comm_hook is not None:
            ddp.register_comm_hook(*resolve_comm_hook(self.ddp_comm_hook, self.ddp_comm_state))
        self.model = ddp
        self._first_backward = True
        return ddp

    def training_step(self, module: Any, *args: Any) -> Any:
        """Through the DDP wrapper, so the reducer is prepared for this backward."""
        assert self.model is not None
        return self.model(*args)

    def manual_training_step(self, module: Any, *args: Any) -> Any:
        """Through the wrapper with DDP's reducer off: ``manual_backward`` syncs, any number of times."""
        assert self.model is not None
        if self.ddp_kwargs["static_graph"]:
            raise ValueError(
                "DDPStrategy(static_graph=True) does not apply to manual optimization "
                "(automatic_optimization = False): manual_backward syncs the gradients, not DDP's "
                "reducer. Remove static_graph=True."
            )
        with self.model.no_sync():  # type: ignore[operator]
            return self.model(*args)

    def no_sync(self, sync: bool) -> ContextManager[Any]:
        """Skip DDP's all-reduce for micro batches that do not end a window."""
        if self.model is None:
            return NO_CONTEXT
        first, self._first_backward = self._first_backward, False
        if sync or (first and self.ddp_kwargs["static_graph"]):
            # With static_graph DDP records the graph in its first backward, which must be synced
            # (torch fails an internal assert under no_sync). Syncing that micro batch is exact:
            # its gradient is then the ranks' mean, the same on every rank, and the window's
            # final all-reduce averages it plus the rest, which is linear.
            return NO_CONTEXT
        return self.model.no_sync()  # type: ignore[operator]
