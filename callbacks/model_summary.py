"""`ModelSummary`: a table of the module's layers, parameters and sizes, printed when fit starts."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from callbacks.callback import Callback

from trainer.contracts.protocols import torch_module
from trainer.contracts.arguments import hint_misspelled_arguments

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView


def summarize(module: nn.Module, max_depth: int = 1) -> str:
    """The summary table of ``module``: one row per submodule down to ``max_depth`` (-1: all).

    Each row has the parameter count, trainable count and size in MB; with an
    ``example_input_array`` on the module, also each row's output shape (one forward in eval mode
    without gradients). Totals follow the table.
    """
    rows, totals = _table(module, max_depth)
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines += ["-" * len(lines[0]), *(f"{value:<10}{label}" for value, label in totals)]
    return "\n".join(lines)


def _table(module: nn.Module, max_depth: int) -> tuple[list[list[str]], list[tuple[str, str]]]:
    """The header and one row per layer, and the totals as (value, label)."""
    layers = [
        (name, sub)
        for name, sub in module.named_modules()
        if name and (max_depth == -1 or name.count(".") < max_depth)
    ]
    shapes = _output_shapes(module, layers)
    header = ["", "Name", "Type", "Params", "Trainable", "Size (MB)"] + (["Out sizes"] if shapes else [])
    rows = [header]
    for i, (name, sub) in enumerate(layers):
        params = list(sub.parameters())
        row = [str(i), name, type(sub).__name__, _count(_numel(params)),
               _count(_numel(p for p in params if p.requires_grad)), f"{_megabytes(params):.3f}"]
        rows.append(row + ([shapes.get(name, "?")] if shapes else []))
    params = list(module.parameters())
    trainable = _numel(p for p in params if p.requires_grad)
    totals = [
        (_count(trainable), "Trainable params"),
        (_count(_numel(params) - trainable), "Non-trainable params"),
        (_count(_numel(params)), "Total params"),
        (f"{_megabytes(params):.3f}", "Total estimated model params size (MB)"),
    ]
    return rows, totals


def _numel(params: Any) -> int:
    return sum(p.numel() for p in params)


def _megabytes(params: list[torch.Tensor]) -> float:
    return sum(p.numel() * p.element_size() for p in params) / 1e6


def _count(n: int) -> str:
    """``n`` in the short form Lightning prints (``1.2 K``, ``3.4 M``)."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return str(n)


def _output_shapes(module: nn.Module, layers: list[tuple[str, nn.Module]]) -> dict[str, str]:
    example = getattr(module, "example_input_array", None)
    if example is None:
        return {}
    shapes: dict[str, str] = {}

    def record(name: str) -> Any:
        def hook(_module: nn.Module, _inputs: Any, output: Any) -> None:
            shapes[name] = str(list(output.shape)) if isinstance(output, torch.Tensor) else type(output).__name__
        return hook

    handles = [sub.register_forward_hook(record(name)) for name, sub in layers]
    device = next((p.device for p in module.parameters()), torch.device("cpu"))
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            if isinstance(example, dict):
                module(**{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in example.items()})
            elif isinstance(example, (list, tuple)):
                module(*[v.to(device) if isinstance(v, torch.Tensor) else v for v in example])
            else:
                module(example.to(device))
    finally:
        module.train(was_training)
        for handle in handles:
            handle.remove()
    return shapes


class ModelSummary(Callback):
    """Prints `summarize` of the module on global rank 0 when fit starts.

    ``max_depth``: 1 lists the top-level submodules, n goes n levels deep, -1 lists every
    submodule, 0 prints nothing.
    """

    role = "model_summary"

    @hint_misspelled_arguments
    def __init__(self, max_depth: int = 1) -> None:
        if isinstance(max_depth, bool) or not isinstance(max_depth, int):
            raise TypeError(f"ModelSummary max_depth must be an int, got {max_depth!r}")
        if max_depth < -1:
            raise ValueError(f"ModelSummary max_depth must be >= -1, got {max_depth}")
        self.max_depth = max_depth

    def on_fit_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if self.max_depth != 0 and trainer.is_global_zero:
            print(summarize(torch_module(pl_module), self.max_depth), flush=True)


class RichModelSummary(ModelSummary):
    """`ModelSummary` drawn as a `rich` table (Lightning's name and arguments; needs the ``rich`` package).

    Without ``rich`` the constructor raises `ModuleNotFoundError` with Lightning's message.
    """

    @hint_misspelled_arguments
    def __init__(self, max_depth: int = 1) -> None:
        try:
            import rich  # noqa: F401 - the dev extra; checked here, as Lightning checks it
        except ImportError:
            raise ModuleNotFoundError(
                "`RichModelSummary` requires `rich` to be installed. Install it by running `pip install -U rich`."
            ) from None
        super().__init__(max_depth)

    def on_fit_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if self.max_depth == 0 or not trainer.is_global_zero:
            return
        from rich.console import Console
        from rich.table import Table

        rows, totals = _table(torch_module(pl_module), self.max_depth)
        table = Table(header_style="bold magenta")
        for column in rows[0]:
            table.add_column(column)
        for row in rows[1:]:
            table.add_row(*row)
        console = Console()
        console.print(table)
        console.print("\n".join(f"{value:<10}{label}" for value, label in totals))
