"""What a Lightning project may use that Lockstep does not do: refused at the start of a run, by name.

Every hook of Lightning's ``LightningModule`` is either called as Lightning calls it or listed in
`REFUSED_MODULE_HOOKS` (a test walks the installed Lightning's hook list to keep this true). A
module that overrides a refused hook, or sets a refused attribute, fails before any work with the
name and the closest Lockstep alternative, never silently trains differently. Lightning's Trainer
arguments that Lockstep cannot honour (`REFUSED_TRAINER_ARGUMENTS`) fail the same way at
``Trainer(...)`` unless given Lightning's default.
"""
from __future__ import annotations

from typing import Any

# hook -> what to use instead
REFUSED_MODULE_HOOKS: dict[str, str] = {
    "configure_sharded_model": "configure_model (Lightning's own replacement; Lockstep calls it under the strategy's init context)",
}

# LightningModule attributes Lockstep does not define, and what becomes of them
UNSUPPORTED_MODULE_ATTRIBUTES: dict[str, str] = {
    "fabric": "Lightning Fabric is not part of Lockstep: the Trainer runs the module",
    "device_mesh": "FSDPStrategy(device_mesh=...) takes the mesh",
    "to_tensorrt": "export with to_onnx and build the engine with TensorRT's own tools",
    "strict_loading": "load_from_checkpoint(strict=False); fit resumes load strictly",
    "remove_ignored_hparams": "save_hyperparameters(ignore=...)",
    "CHECKPOINT_HYPER_PARAMS_KEY": "checkpoints keep hyperparameters under 'hyper_parameters' (docs/checkpointing.md)",
    "CHECKPOINT_HYPER_PARAMS_NAME": "checkpoints keep hyperparameters under 'hyper_parameters' (docs/checkpointing.md)",
    "CHECKPOINT_HYPER_PARAMS_TYPE": "checkpoints keep hyperparameters under 'hyper_parameters' (docs/checkpointing.md)",
}


def check_supported(module: Any) -> None:
    """Raise ``NotImplementedError`` naming every refused hook the module overrides (or attribute it sets)."""
    name = type(module).__name__
    problems = [
        f"{name}.{hook} is not supported: use {alternative}"
        for hook, alternative in REFUSED_MODULE_HOOKS.items()
        if getattr(type(module), hook, None) is not None
    ]
    if module.__dict__.get("strict_loading", True) is False or getattr(type(module), "strict_loading", True) is False:
        problems.append(f"{name}.strict_loading = False is not supported: {UNSUPPORTED_MODULE_ATTRIBUTES['strict_loading']}")
    if problems:
        raise NotImplementedError("; ".join(problems) + " (docs/migration.md).")


# Lightning's Trainer arguments that Lockstep takes only at Lightning's default:
# name -> (Lightning's default, what to use instead). A test checks this against the installed
# Lightning's Trainer signature, so an argument Lightning adds shows up.
REFUSED_TRAINER_ARGUMENTS: dict[str, tuple[Any, str]] = {
    "barebones": (
        False,
        "turn the extras off one by one: logger=False, enable_checkpointing=False, enable_progress_bar=False, "
        "enable_model_summary=False, num_sanity_val_steps=0",
    ),
    "plugins": (
        None,
        "precision=... for a precision plugin, a Strategy object for strategy=...; the cluster environment "
        "(torchrun, SLURM) is detected",
    ),
    "model_registry": (None, "save the checkpoint (ModelCheckpoint, trainer.save_checkpoint) and upload the file"),
}


def check_trainer_supported(args: Any) -> None:
    """Raise ``NotImplementedError`` naming every Lightning Trainer argument passed with a value Lockstep cannot honour."""
    problems = [
        f"Trainer({name}={args[name]!r}) is not supported by Lockstep: {alternative}"
        for name, (default, alternative) in REFUSED_TRAINER_ARGUMENTS.items()
        if not _is_default(args[name], default)
    ]
    if problems:
        raise NotImplementedError("; ".join(problems) + " (docs/migration.md).")


def _is_default(value: Any, default: Any) -> bool:
    if default is None:
        return value is None or (isinstance(value, (list, tuple)) and not value)  # plugins=[]: none
    return value is default
