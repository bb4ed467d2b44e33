"""`BaseFinetuning`: freeze modules before training and unfreeze them into new parameter groups
while it runs (Lightning's class, helpers and schedule)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator, Union

import torch
from torch.nn import Module, ModuleDict
from torch.nn.modules.batchnorm import _BatchNorm

from callbacks.callback import Callback
from trainer.contracts.user_line import user_stacklevel

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView

# a module, or an iterable of modules or of such iterables, at any depth
Modules = Union[Module, Iterable["Modules"]]


class BaseFinetuning(Callback):
    """Subclass it and implement `freeze_before_training` (called in ``setup``, before the optimizers
    exist) and `finetune_function` (called at every train epoch start, per optimizer).

    The parameter groups it adds are kept in its checkpoint state (by parameter name), so a
    resumed fit rebuilds them (`rebuild_optimizer_groups`) before the saved optimizer state is
    checked against the optimizers and loaded, as Lightning's does at fit start. A fit resumed
    inside an epoch does not run that epoch's `finetune_function` again (its changes are in the
    restored optimizer).
    """

    def __init__(self) -> None:
        self._internal_optimizer_metadata: dict[int, list[dict[str, Any]]] = {}
        self._finetuned_epoch = -1

    def state_dict(self) -> dict[str, Any]:
        """The parameter groups each optimizer had, by parameter name, and the last epoch finetuned."""
        return {"internal_optimizer_metadata": self._internal_optimizer_metadata,
                "finetuned_epoch": self._finetuned_epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
        if "internal_optimizer_metadata" in state_dict:
            self._internal_optimizer_metadata = state_dict["internal_optimizer_metadata"]
            self._finetuned_epoch = state_dict.get("finetuned_epoch", -1)  # absent in Lightning's
        else:  # Lightning's layout before its PR #11887: the metadata alone (its keys the group indices)
            self._internal_optimizer_metadata = state_dict  # type: ignore[assignment]

    def rebuild_optimizer_groups(self, trainer: TrainerView, module: ModuleView, checkpoint: dict[str, Any]) -> None:
        """Give the optimizers the parameter groups saved in ``checkpoint`` (and unfreeze their parameters).

        The Trainer calls it when a fit resumes, before it checks the saved optimizer states
        against the optimizers and loads them: those states have the groups this callback added,
        which a fresh ``configure_optimizers`` (on the frozen module) does not.
        """
        state = checkpoint.get("callbacks", {}).get(self.state_key)
        if not state:
            return
        self.load_state_dict(state)
        named = dict(module.named_parameters())
        for index, optimizer in enumerate(trainer.optimizers):
            groups = self._internal_optimizer_metadata.get(index)
            if groups:
                for group in groups:
                    for name in group["params"]:
                        named[name].requires_grad_(True)
                optimizer.param_groups = _map_params(groups, named)

    # -- Lightning's static helpers -------------------------------------------------------------
    @staticmethod
    def flatten_modules(modules: Modules) -> list[Module]:
        """The leaf modules (and modules with their own parameters) of ``modules``."""
        if isinstance(modules, ModuleDict):
            modules = modules.values()
        if isinstance(modules, Iterable):
            found: list[Module] = []
            for m in modules:
                found.extend(BaseFinetuning.flatten_modules(m))
            candidates: Iterable[Module] = found
        else:
            candidates = modules.modules()
        return [m for m in candidates if not list(m.children()) or m._parameters]

    @staticmethod
    def filter_params(modules: Modules, train_bn: bool = True, requires_grad: bool = True) -> Iterator[torch.nn.Parameter]:
        """The parameters of ``modules`` whose ``requires_grad`` is ``requires_grad`` (BatchNorm's only with ``train_bn``)."""
        for mod in BaseFinetuning.flatten_modules(modules):
            if isinstance(mod, _BatchNorm) and not train_bn:
                continue
            for param in mod.parameters(recurse=False):
                if param.requires_grad == requires_grad:
                    yield param

    @staticmethod
    def make_trainable(modules: Modules) -> None:
        """Unfreeze ``modules`` (BatchNorm tracks its running statistics again)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm):
                module.track_running_stats = True
            for param in module.parameters(recurse=False):
                param.requires_grad = True

    @staticmethod
    def freeze_module(module: Module) -> None:
        """Freeze one module's own parameters (a BatchNorm stops tracking statistics)."""
        if isinstance(module, _BatchNorm):
            module.track_running_stats = False
        for param in module.parameters(recurse=False):
            param.requires_grad = False

    @staticmethod
    def freeze(modules: Modules, train_bn: bool = True) -> None:
        """Freeze ``modules``; with ``train_bn`` their BatchNorm layers stay trainable."""
        for mod in BaseFinetuning.flatten_modules(modules):
            if isinstance(mod, _BatchNorm) and train_bn:
                BaseFinetuning.make_trainable(mod)
            else:
                BaseFinetuning.freeze_module(mod)

    @staticmethod
    def filter_on_optimizer(optimizer: torch.optim.Optimizer, params: Iterable[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
        """``params`` that are in none of ``optimizer``'s groups yet (the others are skipped, with a warning)."""
        present = {id(p) for group in optimizer.param_groups for p in group["params"]}
        kept: list[torch.nn.Parameter] = []
        skipped: list[torch.nn.Parameter] = []
        for param in params:
            (skipped if id(param) in present else kept).append(param)
        if skipped:
            import warnings

            warnings.warn(
                "The provided params to be frozen already exist within another group of this optimizer; those "
                "parameters are skipped. Build the optimizer from the trainable parameters only: "
                f"{type(optimizer).__name__}(filter(lambda p: p.requires_grad, self.parameters()), ...)",
                stacklevel=user_stacklevel(),
            )
        return kept

    @staticmethod
    def unfreeze_and_add_param_group(
        modules: Modules,
        optimizer: torch.optim.Optimizer,
        lr: float | None = None,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
    ) -> None:
        """Unfreeze ``modules`` and add their parameters as a new group of ``optimizer`` at ``lr``
        (default: the first group's rate / ``initial_denom_lr``)."""
        BaseFinetuning.make_trainable(modules)
        params_lr = optimizer.param_groups[0]["lr"] if lr is None else float(lr)
        denom = initial_denom_lr if lr is None else 1.0
        params = BaseFinetuning.filter_on_optimizer(
            optimizer, BaseFinetuning.filter_params(modules, train_bn=train_bn, requires_grad=True)
        )
        if params:
            optimizer.add_param_group({"params": params, "lr": params_lr / denom})

    # -- the schedule ---------------------------------------------------------------------------
    def setup(self, trainer: TrainerView, pl_module: ModuleView, stage: str) -> None:
        if stage == "fit":
            self._finetuned_epoch = -1  # a new fit; a resumed one gets its saved value back after this
            self.freeze_before_training(pl_module)

    def on_train_epoch_start(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        # Resumed inside an epoch whose finetuning step the saved run already took: the restored
        # groups and rates include it, and taking it again would compound the rate change.
        if trainer.current_epoch <= self._finetuned_epoch:
            return
        self._finetuned_epoch = trainer.current_epoch
        names = {p: n for n, p in pl_module.named_parameters()}
        for index, optimizer in enumerate(trainer.optimizers):
            before = len(optimizer.param_groups)
            self.finetune_function(pl_module, trainer.current_epoch, optimizer)
            groups = optimizer.param_groups
            if index not in self._internal_optimizer_metadata:
                self._internal_optimizer_metadata[index] = _map_params(groups, names)
            elif before != len(groups):
                self._internal_optimizer_metadata[index].extend(_map_params(groups[before:], names))

    def finetune_function(self, pl_module: ModuleView, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        """Override: unfreeze what ``epoch`` should train (`unfreeze_and_add_param_group`)."""
        raise NotImplementedError

    def freeze_before_training(self, pl_module: ModuleView) -> None:
        """Override: freeze what the first epochs must not train (`freeze`)."""
        raise NotImplementedError


def _map_params(groups: list[dict[str, Any]], mapping: dict[Any, Any]) -> list[dict[str, Any]]:
    """Parameter groups with every parameter replaced through ``mapping`` (names <-> tensors)."""
    return [{**{k: v for k, v in g.items() if k != "params"}, "params": [mapping[p] for p in g["params"]]} for g in groups]
