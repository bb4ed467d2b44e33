"""What a Lightning project may use that Lockstep does not do: refused at the start of a run, by name.

Every hook of Lightning's ``LightningModule`` is either called as Lightning calls it or listed in
`REFUSED_MODULE_HOOKS` (a test walks the installed Lightning's hook list to keep this true). A
module that overrides a refused hook, or sets a refused attribute, fails before any work with the
name and the closest Lockstep alternative, never silently trains differently. Lightning's Trainer
arguments that Lockstep cannot honour (`REFUSED_TRAINER_ARGUMENTS`) fail the same way at
``Trainer(...)`` unless given Lightning's default.
"""
from __future__ import annotations

import dis
import sys
from types import FrameType
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
        "(torchrun, SLURM) is detected; of Lightning's plugins, only a CheckpointIO is taken",
    ),
    "model_registry": (None, "save the checkpoint (ModelCheckpoint, trainer.save_checkpoint) and upload the file"),
}


def check_trainer_supported(args: Any) -> None:
    """Raise ``NotImplementedError`` naming every Lightning Trainer argument passed with a value Lockstep cannot honour."""
    args = {**args, "plugins": _refused_plugins(args["plugins"])}
    problems = [
        f"Trainer({name}={args[name]!r}) is not supported by Lockstep: {alternative}"
        for name, (default, alternative) in REFUSED_TRAINER_ARGUMENTS.items()
        if not _is_default(args[name], default)
    ]
    if problems:
        raise NotImplementedError("; ".join(problems) + " (docs/migration.md).")


def is_checkpoint_io(plugin: Any) -> bool:
    """Whether ``plugin`` is a checkpoint I/O (Lightning's ``CheckpointIO`` interface: save, load, remove)."""
    return all(callable(getattr(plugin, m, None)) for m in ("save_checkpoint", "load_checkpoint", "remove_checkpoint"))


def _refused_plugins(plugins: Any) -> Any:
    # a library's own checkpoint I/O is taken (`trainer.lightning.plugins.checkpoint_io_plugin`); the rest is refused
    if isinstance(plugins, (list, tuple)):
        return [p for p in plugins if not is_checkpoint_io(p)]
    return None if is_checkpoint_io(plugins) else plugins


def _is_default(value: Any, default: Any) -> bool:
    if default is None:
        return value is None or (isinstance(value, (list, tuple)) and not value)  # plugins=[]: none
    return value is default


# Lightning's public names (relative to ``lightning.pytorch``) that Lockstep does not provide, and
# what to use instead. The namespace modules (`trainer.callbacks`, `trainer.utilities`, ...) and
# `python -m trainer.as_lightning` raise with this text; tests/project/test_lightning_namespace.py
# walks the installed Lightning's namespace and fails on a name neither provided nor listed here.
NOT_PROVIDED_NAMES: dict[str, str] = {
    "Fabric": "the Trainer (Lightning Fabric is not part of Lockstep)",
    "fabric": "the Trainer (Lightning Fabric is not part of Lockstep)",
    "strategies.DeepSpeedStrategy": "strategy='fsdp' (FSDPStrategy) for sharded training",
    "strategies.ModelParallelStrategy": "strategy='fsdp' (FSDPStrategy); tensor parallelism is not provided",
    "utilities.CombinedLoader": "one loader per stage, or a list of loaders (several validation loaders get dataloader_idx)",
    "utilities.disable_possible_user_warnings": "warnings.filterwarnings('ignore', ...)",
    "utilities.find_shared_parameters": "the module's named_parameters(remove_duplicate=False)",
    "utilities.set_shared_parameters": "assign the shared parameter in configure_model",
    "utilities.GradClipAlgorithmType": "the strings 'norm' and 'value' (Trainer(gradient_clip_algorithm=...))",
    "utilities.LightningEnum": "enum.Enum",
    "utilities.measure_flops": "torch.utils.flop_counter.FlopCounterMode",
    "utilities.is_shared_filesystem": "a shared default_root_dir (Lockstep writes checkpoints from global rank 0)",
    "utilities.suggested_max_num_workers": "os.cpu_count() // devices",
    "utilities.is_picklable": "pickle.dumps inside try/except",
    "cli.instantiate_class": "the class's constructor (LightningCLI builds class_path / init_args itself)",
    "cli.instantiate_module": "the class's constructor (LightningCLI builds class_path / init_args itself)",
    "plugins": "precision=... for a precision, a Strategy object for strategy=...; under python -m trainer.as_lightning, "
    "lightning.pytorch.plugins provides CheckpointIO and TorchCheckpointIO (Trainer(plugins=[...]))",
    "profilers": "Trainer(profiler='simple' | 'advanced' | 'pytorch'); under python -m trainer.as_lightning, "
    "lightning.pytorch.profilers provides Lightning's classes (trainer.lightning.profilers)",
    "loops": "the Trainer's hooks and callbacks (Lockstep's loops are its own: trainer.loops)",
    "serve": "export with module.to_torchscript() or to_onnx() and serve the file",
    "overrides": "nothing: Lightning's internal wrappers have no Lockstep counterpart",
    # Lockstep's own trainer.accelerators lacks these; under python -m trainer.as_lightning,
    # lightning.pytorch.accelerators provides them (trainer.lightning.accelerators)
    "accelerators.Accelerator": "Trainer(accelerator='cpu' | 'cuda' | 'gpu' | 'auto') (Lightning's classes: trainer.lightning.accelerators)",
    "accelerators.CPUAccelerator": "Trainer(accelerator='cpu') (Lightning's classes: trainer.lightning.accelerators)",
    "accelerators.CUDAAccelerator": "Trainer(accelerator='cuda') (Lightning's classes: trainer.lightning.accelerators)",
    "accelerators.MPSAccelerator": "accelerator='cpu' or 'cuda' (MPS is not supported)",
    "accelerators.XLAAccelerator": "accelerator='cpu' or 'cuda' (TPUs are not supported)",
    "accelerators.find_usable_cuda_devices": "Trainer(devices=N) or CUDA_VISIBLE_DEVICES",
}


class NotProvidedError(ImportError):
    """A Lightning name that Lockstep does not provide, with what to use instead (docs/migration.md)."""


def refused_class(module: str, name: str, alternative: str) -> type:
    """A class standing in ``module`` for Lightning's ``name``, which Lockstep cannot run: it imports,
    can be subclassed and tested with ``isinstance``; making an instance of it or of a subclass raises
    `NotProvidedError` naming ``alternative``."""

    def refuse(cls: type, *args: Any, **kwargs: Any) -> Any:
        raise NotProvidedError(
            f"{cls.__qualname__}: Lightning's `{name}` can be imported and subclassed under Lockstep but not "
            f"used; use {alternative} (docs/migration.md).",
            name=name,
        )

    doc = f"Lightning's ``{name}``, to name, subclass and test with ``isinstance``; not usable on Lockstep."
    return type(name, (), {"__new__": refuse, "__module__": module, "__doc__": doc})


class NotProvidedAttributeError(AttributeError):
    """The same as `NotProvidedError`, for an attribute read (``hasattr`` and ``getattr(..., None)`` stay False/None)."""


def not_provided(module: str, name: str, alternative: str | None = None) -> ImportError | AttributeError:
    """The error for ``module.name``: an `ImportError` inside ``from module import name``, else an `AttributeError`.

    Both name the Lightning name and what to use instead (``alternative``, else `NOT_PROVIDED_NAMES`'s
    entry); an unknown name gets Python's usual text.
    """
    relative = module.split(".", 1)[1] + "." + name if "." in module else name
    alternative = alternative or NOT_PROVIDED_NAMES.get(relative)
    if alternative is None:
        return AttributeError(f"module {module!r} has no attribute {name!r}")
    message = (
        f"{module}.{name}: Lightning's `{relative}` is not provided by Lockstep; use {alternative} "
        "(docs/migration.md lists what is not provided)."
    )
    return NotProvidedError(message, name=name) if _in_from_import() else NotProvidedAttributeError(message)


def _in_from_import() -> bool:
    # `from m import x` turns an AttributeError from m.__getattr__ into a bare "cannot import name":
    # raise ImportError there, so the message survives; a plain read keeps hasattr() working.
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and (frame.f_code.co_name in _FORWARDERS or frame.f_code.co_filename.startswith("<frozen")):
        frame = frame.f_back  # the namespace modules' __getattr__ (a proxy may forward to another) and importlib
    if frame is None:
        return False
    code = frame.f_code.co_code
    return frame.f_lasti < len(code) and code[frame.f_lasti] == _IMPORT_FROM


_IMPORT_FROM = dis.opmap["IMPORT_FROM"]
# the functions between a namespace module's ``__getattr__`` and `not_provided` (`trainer.contracts.missing_names`)
_FORWARDERS = frozenset({"__getattr__", "missing_name"})
