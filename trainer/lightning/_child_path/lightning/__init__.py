"""``lightning``, as a process started by a run under ``python -m trainer.as_lightning`` finds it first
(`trainer.lightning.alias.install` puts this folder first on its children's path): Lockstep's module."""
from trainer.lightning.alias import replace_in_child

replace_in_child(__name__)
