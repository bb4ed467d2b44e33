"""Numeric precision: full fp32, bf16 autocast, fp16 autocast with loss scaling, and pure bf16."""
from __future__ import annotations

import contextlib
from typing import Any, ContextManager, Iterator

import torch
from torch import nn

from trainer.data.batch import apply_to_tensors
from trainer.distributed.rank_zero import rank_zero_warn
from trainer.contracts.user_line import user_stacklevel

_ALIASES = {
    "32-true": "32-true",
    "32": "32-true",
    32: "32-true",
    "bf16-mixed": "bf16-mixed",
    "bf16": "bf16-mixed",
    "bf16-true": "bf16-true",
    "16-mixed": "16-mixed",
    "16": "16-mixed",
    16: "16-mixed",
    "16-true": "16-true",
    "64-true": "64-true",
    "64": "64-true",
    64: "64-true",
}
SUPPORTED_PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true")
# the whole module (parameters, inputs, what forward creates) in one dtype, as Lightning's HalfPrecision / DoublePrecision
_TRUE_DTYPES = {"bf16-true": torch.bfloat16, "16-true": torch.float16, "64-true": torch.float64}
_NO_AUTOCAST = contextlib.nullcontext()  # stateless and reusable: no allocation per step


def normalize_precision(precision: Any) -> str:
    """Map the Trainer's ``precision`` argument to one of ``SUPPORTED_PRECISIONS``."""
    # bool is an int and 32.0 == 32: neither may pass as a precision by accident
    if isinstance(precision, bool) or not isinstance(precision, (str, int)):
        raise TypeError(
            f"precision must be a str or an int, one of {', '.join(map(repr, SUPPORTED_PRECISIONS))}; "
            f"got {precision!r}"
        )
    try:
        name = _ALIASES[precision]
    except (KeyError, TypeError):
        raise ValueError(
            f"Unknown precision {precision!r}. Use one of {', '.join(map(repr, SUPPORTED_PRECISIONS))}."
        ) from None
    if str(precision) in ("16", "bf16"):  # Lightning's warning, word for word
        rank_zero_warn(
            f"`precision={precision}` is supported for historical reasons but its usage is discouraged. "
            f"Please set your precision to {name} instead!",
            stacklevel=user_stacklevel(),
        )
    return name


class Precision:
    """Autocast context, backward, unscaling and optimizer stepping for one precision.

    ``"bf16-true"`` (Lightning's name) runs the whole module in bf16: its parameters, gradients
    and optimizer state are bf16 (half the memory of fp32), floating-point batches are cast to
    bf16 before each step, tensors the steps create are bf16 (the default dtype), and nothing is
    autocast; ``"16-true"`` (fp16) and ``"64-true"`` (fp64) likewise. ``"16-mixed"`` on CPU warns
    and runs ``"bf16-mixed"``, as Lightning does (fp16 autocast needs CUDA).
    """

    def __init__(self, precision: str, device_type: str) -> None:
        self.precision = normalize_precision(precision)
        self.device_type = device_type
        if self.precision == "16-mixed" and device_type == "cpu":
            rank_zero_warn(
                "You passed `Trainer(accelerator='cpu', precision='16-mixed')` but AMP with fp16 is not supported on "
                "CPU. Using `precision='bf16-mixed'` instead.",
                stacklevel=user_stacklevel(),
            )
            self.precision = "bf16-mixed"
        if self.precision == "16-mixed" and device_type != "cuda":
            raise ValueError(
                "precision='16-mixed' needs a CUDA device (fp16 autocast with a GradScaler); this "
                f"run is on {device_type!r}. Use precision='bf16-mixed' on CPU, or accelerator='cuda'."
            )
        self.scaler: torch.amp.GradScaler | None = (
            torch.amp.GradScaler("cuda") if self.precision == "16-mixed" else None
        )
        self._dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(self.precision)
        self.module_dtype = _TRUE_DTYPES.get(self.precision)  # of the whole module
        self._unscaled: set[int] = set()  # optimizers unscaled since the last `update` (fp16)
        # whether `autocast` gives a context at all: the loop enters none per step when not
        self.has_autocast = self.module_dtype is not None or self._dtype is not None

    def autocast(self) -> ContextManager[Any]:
        """The context forward passes run in (the ``*-true`` precisions: their dtype as the default)."""
        if self.module_dtype is not None:
            return self.module_init_context()
        if self._dtype is None:
            return _NO_AUTOCAST
        return torch.autocast(self.device_type, dtype=self._dtype)

    @contextlib.contextmanager
    def module_init_context(self) -> Iterator[None]:
        """Where ``configure_model`` builds layers: in the precision's dtype directly under ``"*-true"``."""
        if self.module_dtype is None:
            yield
            return
        previous = torch.get_default_dtype()
        torch.set_default_dtype(self.module_dtype)
        try:
            yield
        finally:
            torch.set_default_dtype(previous)

    def convert_module(self, module: nn.Module) -> nn.Module:
        """The module in its precision's dtype (``"bf16-true"``: every floating-point tensor in bf16, and so on)."""
        return module if self.module_dtype is None else module.to(self.module_dtype)

    def convert_input(self, batch: Any) -> Any:
        """The batch as the module computes in it (``"*-true"``: floating-point tensors in its dtype)."""
        dtype = self.module_dtype
        if dtype is None:
            return batch
        return apply_to_tensors(batch, lambda t: t.to(dtype) if t.is_floating_point() else t)

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Backward (arguments as ``Tensor.backward``'s), through the loss scaler under fp16."""
        if self.scaler is not None:
            self.scaler.scale(loss).backward(*args, **kwargs)
        else:
            loss.backward(*args, **kwargs)

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring gradients back to their true scale (before clipping or inspecting them).

        Once per optimizer between updates: a manual ``clip_gradients`` unscales before the step does.
        """
        if self.scaler is not None and id(optimizer) not in self._unscaled:
            self._unscaled.add(id(optimizer))
            self.scaler.unscale_(optimizer)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, **kwargs: Any) -> None:
        """Step; under fp16 the scaler skips the step when gradients overflowed."""
        if self.scaler is not None:
            self.scaler.step(optimizer, **kwargs)
        else:
            optimizer.step(**kwargs)

    def update(self) -> None:
        """Adjust the loss scale once per optimizer step (after every optimizer stepped)."""
        if self.scaler is not None:
            self.scaler.update()
            self._unscaled.clear()

    def state_dict(self) -> dict[str, Any]:
        """The grad scaler's state (empty without one)."""
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the grad scaler's state."""
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)
