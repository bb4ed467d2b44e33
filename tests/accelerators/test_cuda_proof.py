"""What only a GPU machine can show: NCCL DDP, FSDP with bf16-mixed and DALI on the GPU, each
compared with a one-process reference. Skipped, with the reason, without CUDA; run by
``python -m benchmarks.gpu_check`` (with every other ``-m cuda`` test)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from callbacks import Callback
from tests.helpers.distributed import run_ranks
from tests.helpers.models import QUIET, Regression, assert_params_close, loader, params_of, regression_data
from trainer import FSDPStrategy, Trainer

B = 4  # micro batch per rank


def _reference(precision: str = "32-true", accelerator: str = "cuda", world: int = 2) -> list[torch.Tensor]:
    """One process with the global batch of ``world`` ranks."""
    module = Regression("sgd")
    Trainer(accelerator=accelerator, devices=1, max_epochs=2, precision=precision, **QUIET).fit(
        module, loader(regression_data(64), world * B)
    )
    return [p.float().cpu() for p in params_of(module)]


class _Backend(Callback):
    """The process group's backend and the module's device while training runs."""

    def on_train_start(self, trainer: Any, module: Any) -> None:
        self.backend = torch.distributed.get_backend()
        self.device = str(next(module.parameters()).device)


def _ddp_on_gpus(rank: int, world_size: int) -> dict[str, Any]:
    module, seen = Regression("sgd"), _Backend()
    trainer = Trainer(accelerator="cuda", devices=world_size, strategy="ddp", max_epochs=2, callbacks=[seen], **QUIET)
    trainer.fit(module, loader(regression_data(64), B))
    return {"params": [p.cpu() for p in params_of(module)], "backend": seen.backend, "device": seen.device}


@pytest.mark.cuda(devices=2)
@pytest.mark.timeout(300)
def test_nccl_ddp_on_two_gpus_equals_one_process():
    runs = run_ranks(_ddp_on_gpus, world_size=2, init_group=False, timeout=240)
    expected = _reference()
    for rank, run in enumerate(runs):
        assert run["backend"] == "nccl" and run["device"] == f"cuda:{rank}"
        assert_params_close(run["params"], expected, 1e-5)


def _fsdp_bf16(rank: int, world_size: int) -> dict[str, Any]:
    module = Regression("sgd")
    trainer = Trainer(accelerator="cuda", devices=world_size, strategy=FSDPStrategy(), precision="bf16-mixed", max_epochs=2, **QUIET)
    trainer.fit(module, loader(regression_data(64), B))
    shards = {(p.to_local() if hasattr(p, "to_local") else p).dtype for p in module.parameters()}
    full = [(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().float().cpu() for p in module.parameters()]
    return {"params": full, "shard_dtypes": shards}


@pytest.mark.cuda
@pytest.mark.timeout(300)
def test_fsdp_bf16_mixed_on_cuda_equals_one_process():
    world = min(2, torch.cuda.device_count())
    runs = run_ranks(_fsdp_bf16, world_size=world, init_group=False, timeout=240)
    expected = _reference(precision="bf16-mixed", world=world)
    for run in runs:
        assert run["shard_dtypes"] == {torch.float32}  # bf16 compute, fp32 shards and optimizer
        assert_params_close(run["params"], expected, 2e-2)  # bf16 rounding differs with the batch split


@pytest.mark.cuda
@pytest.mark.timeout(300)
def test_dali_pipeline_on_the_gpu_trains_as_on_the_cpu(tmp_path: Path):
    pytest.importorskip("nvidia.dali", reason="NVIDIA DALI is not installed (the `dali` extra)")
    from tests.data.test_dali import Linear, gpu_samples, samples, write_samples
    from trainer.data.dali import DALILoader

    write_samples(tmp_path, 16)
    results = {}
    for accelerator, definition, kwargs in (("cpu", samples, {}), ("cuda", gpu_samples, {"device_id": 0})):
        module = Linear()
        trainer = Trainer(accelerator=accelerator, devices=1, max_epochs=2, **QUIET)
        trainer.fit(module, DALILoader(definition, ["x"], file_root=str(tmp_path), **kwargs))
        results[accelerator] = ([p.detach().cpu() for p in module.parameters()], module.seen, next(module.parameters()).device.type)
    assert results["cuda"][2] == "cuda"
    assert results["cuda"][1] == results["cpu"][1]  # the same samples in the same order
    assert_params_close(results["cuda"][0], results["cpu"][0], 1e-5)
