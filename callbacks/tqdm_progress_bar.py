"""`TQDMProgressBar`: Lightning's name and arguments for `ProgressBar` (the tqdm bar)."""

from __future__ import annotations

from callbacks.progress_bar import ProgressBar
from trainer.contracts.arguments import hint_misspelled_arguments


class TQDMProgressBar(ProgressBar):
    """`ProgressBar` under Lightning's name.

    Args:
        refresh_rate: Redraw every this many batches (0 disables the bar).
        process_position: Lightning's line offset for several bars; only 0 is supported.
        leave: Keep each finished epoch's bar on the screen.
    """

    @hint_misspelled_arguments
    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False) -> None:
        if process_position != 0:
            raise ValueError(f"TQDMProgressBar(process_position={process_position!r}): only 0 is supported.")
        super().__init__(refresh_rate=refresh_rate, leave=leave)
