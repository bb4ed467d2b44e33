"""Every random state a run saves and restores, in one place.

Python's ``random``, NumPy's global generator (when installed), torch's CPU generator and every
CUDA device's, and the torch generators a loader draws its order from. Checkpoints
(`trainer.checkpointing.resume`), the sanity check (`isolated_rng`) and FSDP's meta-device
initialization (`share_torch_rng_state`) go through these functions.

States are always restored from CPU byte tensors, whatever device a checkpoint's tensors were
loaded to: torch, CUDA and generator ``set_state`` accept nothing else.
"""
from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator
from typing import Any

import torch


def capture_rng_state() -> dict[str, Any]:
    """Python, NumPy (as plain lists), torch CPU and every CUDA device's RNG states."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np
    except ImportError:
        pass
    else:
        legacy = np.random.get_state(legacy=True)
        assert isinstance(legacy, tuple)  # legacy=True: numpy's (kind, keys, pos, has_gauss, gauss)
        kind, keys, pos, has_gauss, gauss = legacy
        state["numpy"] = (kind, torch.from_numpy(keys.astype("int64")), pos, has_gauss, gauss)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _cpu_bytes(state: torch.Tensor) -> torch.Tensor:
    return state.detach().to(device="cpu", dtype=torch.uint8)


def restore_rng_state(state: dict[str, Any]) -> None:
    """Undo :func:`capture_rng_state`."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(_cpu_bytes(state["torch"]))
    if "numpy" in state:
        import numpy as np

        kind, keys, pos, has_gauss, gauss_np = state["numpy"]
        np.random.set_state((kind, keys.detach().cpu().numpy().astype("uint32"), pos, has_gauss, gauss_np))
    if "cuda" in state and torch.cuda.is_available():
        # a checkpoint from a machine with more GPUs: the devices this one has get their states
        for index, device_state in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(_cpu_bytes(device_state), index)


def loader_generators(loader: Any) -> list[torch.Generator]:
    """The torch generators a loader draws its order from (the loader's and its samplers')."""
    found: list[torch.Generator] = []
    batch_sampler = getattr(loader, "batch_sampler", None)
    for owner in (loader, getattr(loader, "sampler", None), batch_sampler, getattr(batch_sampler, "sampler", None)):
        gen = getattr(owner, "generator", None)
        if isinstance(gen, torch.Generator) and all(gen is not g for g in found):
            found.append(gen)
    return found


def capture_generators(loader: Any) -> list[torch.Tensor]:
    """The states of the generators ``loader`` draws its order from, as of now."""
    return [g.get_state() for g in loader_generators(loader)]


def restore_generators(loader: Any, states: list[torch.Tensor]) -> None:
    """Undo :func:`capture_generators` on the same kind of loader."""
    for gen, saved in zip(loader_generators(loader), states):
        gen.set_state(_cpu_bytes(saved))


def share_torch_rng_state(broadcast: Callable[[torch.Tensor], torch.Tensor], device: torch.device) -> None:
    """Every rank takes rank 0's torch CPU RNG state (and ``device``'s, a CUDA device):
    ``broadcast`` sends rank 0's tensor to every rank."""
    torch.set_rng_state(broadcast(torch.get_rng_state()))
    if device.type == "cuda":
        torch.cuda.set_rng_state(broadcast(torch.cuda.get_rng_state(device)), device)


@contextlib.contextmanager
def isolated_rng() -> Iterator[None]:
    """Run a block without moving any global RNG: their states are restored when it ends.

    The sanity check runs in it, so a seed gives the same training whatever
    ``num_sanity_val_steps`` is (each DataLoader iterator draws a seed; Lightning does the same).
    """
    state = capture_rng_state()
    try:
        yield
    finally:
        restore_rng_state(state)
