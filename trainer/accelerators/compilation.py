"""``Trainer(compile=True)``: ``torch.compile`` the module in place before the strategy wraps it."""
from __future__ import annotations

from torch import nn


def compile_module(module: nn.Module) -> None:
    """Compile ``module``'s forward in place (``nn.Module.compile``).

    In place, so the module the user holds, its ``state_dict`` keys and every hook keep working;
    ``training_step`` runs eagerly and calls the compiled forward through ``self(...)``.
    Compiling happens lazily at the first forward, so errors (e.g. no C++ compiler for the CPU
    backend) surface there, from torch.
    """
    module.compile()


def is_compiled(module: nn.Module) -> bool:
    """Whether ``module.compile()`` was applied to ``module``."""
    return module._compiled_call_impl is not None


def prepare_for_speed(module: nn.Module, channels_last: bool, compile: bool) -> None:
    """``channels_last`` then ``compile``, in place, before the strategy moves and wraps ``module``."""
    if channels_last:
        from trainer.accelerators.memory_format import to_channels_last

        to_channels_last(module)
    if compile and not is_compiled(module):  # a second fit keeps the first compile's caches
        compile_module(module)
