"""`DDPStrategy`: torch's DistributedDataParallel, with accumulation windows under ``no_sync``."""
from __future__ import annotations

import inspect
import datetime
from typing import Any, Callable, ContextManager

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainer.accelerators.accelerator import Accelerator
from trainer.contracts.arguments import check_bool, check_number
from trainer.strategies.process_group import DEFAULT_TIMEOUT, ProcessGroupStrategy
from trainer.strategies.strategy import NO_CONTEXT, lightning_rules


# torch 2.14 renamed `broadcast_buffers` (buffers synced from rank 0 before each forward).
_BUFFER_SYNC_ARG = (
    "forward_sync_buffers"
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
    else "broadcast_buffers"
)


# Names accepted for ``ddp_comm_hook`` (torch's built-in hooks). fp16_compress and powersgd run
# on gloo (CPU) and NCCL; bf16_compress needs a torch build that passes `_bf16_hook_supported`,
# whatever the backend (gloo included).
COMM_HOOKS = ("fp16_compress", "bf16_compress", "powersgd")
_BF16_HOOK_NAMES = ("bf16_compress_hook", "bf16_compress_wrapper_hook")  # the names torch checks


def _bf16_hook_supported() -> bool:
    """Whether ``DistributedDataParallel.register_comm_hook`` accepts torch's bf16 hooks on this build.

    The condition of torch's ``DistributedDataParallel._check_comm_hook`` (torch/nn/parallel/
    distributed.py), for any backend: a CUDA or ROCm build with NCCL >= 2.10, or XPU with XCCL.
    Checked here so that the strategy refuses at construction, not in every worker after launch.
    """
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        return False
    gpu_build = torch.version.cuda is not None or torch.version.hip is not None
    if gpu_build and dist.is_nccl_available() and torch.cuda.nccl.version() >= (2, 10):
        return True
    xccl = getattr(dist, "is_xccl_available", None)
    return bool(xccl is not None and xccl() and torch.xpu.is_available())


def _refuse_unsupported_bf16_hook(hook: str | Callable[..., Any]) -> None:
    name = hook if isinstance(hook, str) else getattr(hook, "__name__", "")
    if name not in ("bf16_compress", *_BF16_HOOK_NAMES) or _bf16_hook_supported():
        return
    import torch

    shown = repr(hook) if isinstance(hook, str) else name
    build = f"torch {torch.__version__}, CUDA {torch.version.cuda}" + (
        ", a CPU-only build" if torch.version.cuda is None and torch.version.hip is None else ", NCCL < 2.10"
    )
    raise ValueError(
        f"DDPStrategy(ddp_comm_hook={shown}) cannot run on this torch build ({build}): torch's bf16 hook "
        "needs a CUDA (or ROCm) build with NCCL >= 2.10, or XPU with XCCL, even on the gloo backend. "
        "Use ddp_comm_hook='fp16_compress' (half the bytes too) or 'powersgd', or install a CUDA build "
        "of torch."
    )


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
        # nn.Module types its attributes Tensor | Module; this one is a TrainModule's method
        return self.module.training_step(*args)  # type: ignore[operator]


class DDPStrategy(ProcessGroupStrategy):
    """Data parallel training with ``torch.nn.parallel.DistributedDataParallel``.

    The keyword arguments go straight to ``DistributedDataParallel``. Non-final micro batches of
    an accumulation window run forward and backward inside ``no_sync()``, so gradients are
    all-reduced once per optimizer step.

    ``ddp_comm_hook`` changes how gradients are communicated: ``"fp16_compress"`` /
    ``"bf16_compress"`` (all-reduce in half precision: half the bytes; bf16 needs a CUDA build of
    torch even on gloo, else a ``ValueError`` here), ``"powersgd"`` (low-rank
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
        accelerator: str | Accelerator | None = None,
    ) -> None:
        if ddp_comm_hook is not None and not callable(ddp_comm_hook):
            bad_hook = f"ddp_comm_hook must be one of {COMM_HOOKS} or a callable, got {ddp_comm_hook!r}"
            if not isinstance(ddp_comm_hook, str):
                raise TypeError(bad_hook)
            if ddp_comm_hook not in COMM_HOOKS:
                raise ValueError(bad_hook)
        if ddp_comm_hook is not None:
            _refuse_unsupported_bf16_hook(ddp_comm_hook)
        # DDP reads these with `if`: a truthy "no" would silently switch them on
        check_bool("gradient_as_bucket_view", gradient_as_bucket_view)
        check_bool("find_unused_parameters", find_unused_parameters)
        check_bool("static_graph", static_graph)
        check_bool("broadcast_buffers", broadcast_buffers)
        check_number("bucket_cap_mb", bucket_cap_mb, minimum=0)
        super().__init__(timeout=timeout, process_group_backend=process_group_backend, accelerator=accelerator)
        self.ddp_kwargs: dict[str, Any] = {
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
        with self.collectives.inside("DDP set-up (broadcast from rank 0)"):
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

    def before_evaluation(self) -> None:
        """Under the runner: rank 0's buffers (BatchNorm statistics) where DDP's forward would give them
        to Lightning's first evaluation step after a training one (Lightning runs evaluation steps through
        the DDP wrapper, Lockstep calls the module); DDP then skips the next forward's sync, as there."""
        ddp = self.model
        if not lightning_rules() or not isinstance(ddp, DistributedDataParallel) or not ddp.will_sync_module_buffers():
            return
        import torch.distributed as dist

        with self.collectives.inside("evaluation: buffers from rank 0"):
            for buffer in ddp.modules_buffers:
                dist.broadcast(buffer, src=0)
        ddp.require_forward_param_sync = False  # as DDP leaves it after a forward without gradients

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
        # a typed name, not a cast (this runs every micro batch): the DDP wrapper's no_sync()
        window: ContextManager[Any] = self.model.no_sync()  # type: ignore[operator]
        return window
