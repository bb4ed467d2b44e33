"""Run a Lightning project on Lockstep by renaming its imports, and nothing else.

`load(name, framework)` reads `lightning_examples/<name>.py`; for ``"lockstep"`` it replaces the
import lines named in `IMPORT_RENAMES` (docs/migration.md lists the same renames) and checks that no
other line changed. The text is executed as a fresh module, so both frameworks run the very same code.
"""
from __future__ import annotations

import sys
import types
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent / "lightning_examples"

# Lightning's import line -> Lockstep's. Only import lines are ever rewritten.
IMPORT_RENAMES = {
    "import lightning.pytorch as L": "import trainer as L",
    "import lightning as L": "import trainer as L",
    "from lightning.pytorch import LightningModule, Trainer, seed_everything": "from trainer import LightningModule, Trainer, seed_everything",
    "from lightning.pytorch.loggers import TensorBoardLogger": "from callbacks import TensorBoardLogger",
}


# Imports of plain torch code (an nn.Module, a Dataset) from Lightning's demos, kept on both sides: the
# same objects run on both frameworks, and nothing of Lightning's Trainer or LightningModule is used.
KEPT_IMPORTS = {"from lightning.pytorch.demos import Transformer, WikiText2"}


def ported_source(name: str) -> tuple[str, str]:
    """The example's Lightning text and its Lockstep text (only the imports renamed)."""
    original = (EXAMPLES / f"{name}.py").read_text()
    ported = "\n".join(IMPORT_RENAMES.get(line, line) for line in original.split("\n"))
    return original, ported


def load(name: str, framework: str) -> types.ModuleType:
    """The example ``name`` executed as a module for ``framework`` ("lightning" or "lockstep")."""
    original, ported = ported_source(name)
    text = {"lightning": original, "lockstep": ported}[framework]
    module = types.ModuleType(f"port_{name}_{framework}")
    module.__file__ = str(EXAMPLES / f"{name}.py")
    # registered so that classes defined in it can be pickled (hyperparameters, checkpoints)
    sys.modules[module.__name__] = module
    exec(compile(text, module.__file__, "exec"), module.__dict__)
    return module
