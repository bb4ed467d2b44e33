"""The Lightning face: what makes Lockstep answer as Lightning 2.x does, kept above the core.

The core (`trainer.trainer`, the loops, the strategies) works without it and calls it through
narrow interfaces: the Trainer looks up a name it lacks in `trainer.lightning.attributes`, a
namespace package explains a name it lacks through `trainer.contracts.missing_names`.

- `alias`: ``python -m trainer.as_lightning SCRIPT``'s finder (Lightning's module names as Lockstep's)
- `attributes`: Lightning's other Trainer attributes, a view of one Trainer
- `accelerator_connector`: ``trainer._accelerator_connector``, read by integrations
- `unsupported`: the hooks, attributes, arguments and names Lockstep refuses, with what to use instead
- `fabric_types`: the type names of ``lightning.fabric.utilities.types``
- `fabric_io`, `plugins`: Lightning's checkpoint I/O (``Trainer(plugins=[CheckpointIO])``)
- `environments`: ``lightning.pytorch.plugins.environments`` (cluster-environment plugins)
- `accelerators`, `profilers`: ``lightning.pytorch.accelerators`` / ``.profilers`` under the runner
- `demos`: ``lightning.pytorch.demos`` (public as ``trainer.demos``)
- `old_names`: the import paths these modules had at the top of `trainer`, and those of renamed modules
"""
