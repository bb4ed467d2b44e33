"""The module's and optimizers' states under FSDP (DTensor shards keyed by name), and loading
a sharded or a full state into a sharded module or one not sharded yet."""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from trainer.checkpoint_io.sharded_read import ShardedState, read_full, read_index, read_into
from trainer.checkpoint_io.tensor_trees import keep_tensors, merge_tensors, split_tensors


def sharded_module_state(module: nn.Module) -> dict[str, Any]:
    """The module's state as this rank's DTensor shards, keyed like ``module.state_dict()``."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(module)


def sharded_optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's state as this rank's shards, keyed by parameter name (not position)."""
    if not optimizer.state:
        # torch would run a zero step to create the state, which changes the run (Adam's step count)
        names = {p: n for n, p in module.named_parameters()}
        groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [names[p] for p in g["params"]]}
                  for g in optimizer.param_groups]
        return {"state": {}, "param_groups": groups}
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return get_optimizer_state_dict(module, optimizer)


def load_module_state(module: nn.Module, state: Mapping[str, Any]) -> None:
    """Load ``state`` into ``module``: a `ShardedState` (read and resharded now) or a full state
    dict, into a sharded module or one not sharded yet."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    sharded = _is_sharded(module)
    if isinstance(state, ShardedState):
        if not sharded:  # e.g. `validate(ckpt_path=...)` loads before the module is sharded
            module.load_state_dict(read_full(state.path, state.key, state.weights_only))
            return
        target = sharded_module_state(module)
        read_into(state, target)
        set_model_state_dict(module, target)
        return
    if sharded:
        set_model_state_dict(module, dict(state), options=StateDictOptions(full_state_dict=True))
    else:
        module.load_state_dict(state)


def load_optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
    """Load ``state`` into the optimizer of the sharded ``module``: a `ShardedState` (resharded),
    or a full state as ``optimizer.state_dict()`` writes it (from a single-file checkpoint)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    if not isinstance(state, ShardedState):
        full = _by_name(module, optimizer, state)
        set_optimizer_state_dict(module, optimizer, full, options=StateDictOptions(full_state_dict=True))
        return
    target = get_optimizer_state_dict(module, optimizer)  # creates the state to read into
    tensors, _ = split_tensors(target)
    saved = set(read_index(state.path, state.weights_only).state_dict_metadata)
    # only what was saved: a parameter without state (no step yet) stays without
    tensors = keep_tensors(tensors, lambda key: ".".join((*state.key, *key)) in saved)
    read_into(state, tensors)
    set_optimizer_state_dict(module, optimizer, merge_tensors(dict(state), tensors))


def _by_name(module: nn.Module, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> dict[str, Any]:
    """An ``optimizer.state_dict()`` (parameters numbered) keyed by parameter names instead."""
    names = {p: n for n, p in module.named_parameters()}
    order = [names[p] for g in optimizer.param_groups for p in g["params"]]
    groups = [{**g, "params": [order[i] for i in g["params"]]} for g in state["param_groups"]]
    return {"state": {order[i]: s for i, s in state["state"].items()}, "param_groups": groups}


def _is_sharded(module: nn.Module) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in module.parameters())

