"""Launched by tests with torchrun or python: reports what each process sees.

Saves ``rank{R}.pt`` into ``$LOCKSTEP_TEST_OUT`` with the detected cluster environment and, when
distributed, the sum of all ranks (proving the rendezvous worked).
"""
import dataclasses

import torch
import torch.distributed as dist

from tests.helpers.distributed import save_rank_result
from trainer.distributed.cluster_environment import detect_cluster_environment

env = detect_cluster_environment()
total = None
if env.is_distributed:
    dist.init_process_group("gloo")
    value = torch.tensor([float(env.global_rank)])
    dist.all_reduce(value)
    total = value.item()
    dist.destroy_process_group()
save_rank_result({"env": dataclasses.asdict(env), "sum": total}, rank=env.global_rank)
print(f"rank {env.global_rank} done")
