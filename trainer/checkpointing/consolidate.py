"""Turn a sharded checkpoint directory into one checkpoint file, in one process:

    python -m trainer.checkpointing.consolidate SRC_DIR OUT_FILE

The file holds the full module and optimizer states (as a single-process run writes them) and
loads with ``torch.load(weights_only=True)``, ``TrainModule.load_from_checkpoint`` and as the
``ckpt_path`` of any strategy. The function is `consolidate_checkpoint`.
"""
from __future__ import annotations

import argparse
import sys

from trainer.checkpoint_io.file_format import CheckpointError
from trainer.checkpoint_io.sharded_read import consolidate_checkpoint

__all__ = ["consolidate_checkpoint", "main"]


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m trainer.checkpointing.consolidate",
        description="Write a sharded (FSDP) checkpoint directory as one checkpoint file.",
    )
    parser.add_argument("src", help="the sharded checkpoint directory (e.g. checkpoints/last.ckpt)")
    parser.add_argument("dst", help="the checkpoint file to write")
    parser.add_argument(
        "--trust", action="store_true",
        help="load meta.pt with weights_only=False (only for checkpoints you trust)",
    )
    args = parser.parse_args(argv)
    try:
        out = consolidate_checkpoint(args.src, args.dst, weights_only=not args.trust)
    except CheckpointError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
