"""The Lockstep side of Lightning's modules that Lockstep has no counterpart of (``serve``,
``overrides``, ``_graveyard``, most of Fabric): empty. Under ``python -m trainer.as_lightning``
their public names are `trainer.lightning.tree`'s (Lockstep's object where another place has it,
else a stand-in that imports and raises, naming what to use, when used)."""
