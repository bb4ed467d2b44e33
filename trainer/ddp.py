"""`DDPStrategy`: torch's DistributedDataParallel, with accumulation windows under ``no_sync``."""
from __future__ import annotations

import contextlib
import inspect
import datetime
from typing import Any, ContextManager

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainer.process_group import DEFAULT_TIMEOUT, ProcessGroupStrategy


# torch 2.14 renamed `broadcast_buffers` (buffers synced from rank 0 before each forward).
_BUFFER_SYNC_ARG = (
    "forward_sync_buffers"
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
    else "broadcast_buffers"
)


class _StepForward(nn.Module):
    """Routes DDP's ``forward`` to ``training_step`` so DDP's reducer sees the step's graph."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, batch: Any, batch_idx: int) -> Any:
        return self.module.training_step(batch, batch_idx)


class DDPStrategy(ProcessGroupStrategy):
    """Data parallel training with ``torch.nn.parallel.DistributedDataParallel``.

    The keyword arguments go straight to ``DistributedDataParallel``. Non-final micro batches of
    an accumulation window run forward and backward inside ``no_sync()``, so gradients are
    all-reduced once per optimizer step.
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
        ddp_comm_hook: Any = None,
        ddp_comm_state: Any = None,
    ) -> None:
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
            ddp.register_comm_hook(self.ddp_comm_state, self.ddp_comm_hook)
        self.model = ddp
        return ddp

    def training_step(self, module: Any, batch: Any, batch_idx: int) -> Any:
        """Through the DDP wrapper, so the reducer is prepared for this backward."""
        assert self.model is not None
        return self.model(batch, batch_idx)

    def no_sync(self, sync: bool) -> ContextManager[Any]:
        """Skip DDP's all-reduce for micro batches that do not end a window."""
        if sync or self.model is None:
            return contextlib.nullcontext()
        return self.model.no_sync()  # type: ignore[operator]
