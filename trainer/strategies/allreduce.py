"""`AllReduceStrategy`: data parallelism written out by hand, as in the DDP blog post.

It is the readable reference for what DDP does (and a cross-check of it in the tests): rank 0's
parameters are verified identical everywhere at the start, and after the last backward of each
accumulation window every gradient is summed with ``all_reduce`` and divided by the world size.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from trainer.strategies.process_group import ProcessGroupStrategy


class ParameterMismatchError(RuntimeError):
    """Ranks started with different parameters."""


class AllReduceStrategy(ProcessGroupStrategy):
    """Hand-written data parallelism: broadcast check at start, gradient all-reduce per window."""

    name = "allreduce"

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Move to the device, convert BatchNorm if asked, and check every rank holds rank 0's weights."""
        module = self._prepare_module(module)
        with self.collectives.inside("parameter check (broadcast from rank 0)"):
            _check_same_parameters(module, self.world_size)
            for buffer in module.buffers():  # buffers (BatchNorm statistics) start from rank 0's
                dist.broadcast(buffer, src=0)
        self.model = module
        self._params = [p for p in module.parameters() if p.requires_grad]
        return module

    def after_backward_window(self) -> None:
        """Average gradients over ranks: sum with ``all_reduce``, divide by W."""
        with self.collectives.inside("gradient all_reduce"):
            for param in self._params:
                if param.grad is not None:
                    dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
                    param.grad.div_(self.world_size)


def _check_same_parameters(module: nn.Module, world_size: int) -> None:
    named = list(module.named_parameters())
    first_bad = len(named)
    for i, (_, param) in enumerate(named):
        reference = param.detach().clone()
        dist.broadcast(reference, src=0)
        # no early exit: every rank must issue the same number of broadcasts
        if first_bad == len(named) and not torch.equal(reference, param.detach()):
            first_bad = i
    # Every rank must raise, or the ranks whose weights matched would wait for the others forever.
    votes = torch.tensor([first_bad], device=named[0][1].device if named else "cpu")
    gathered = [torch.zeros_like(votes) for _ in range(world_size)]
    dist.all_gather(gathered, votes)
    firsts = [int(v) for v in gathered]
    if min(firsts) < len(named):
        bad_rank = firsts.index(min(firsts))
        name = named[min(firsts)][0]
        raise ParameterMismatchError(
            f"Model parameters differ across ranks: {name!r} on rank {bad_rank} is not equal to rank 0's. "
            "Seed every rank identically (seed_everything) before building the model."
        )
