"""`DALILoader`: DALI pipelines sharded by rank, one reader epoch per Trainer epoch, exact resume.

The data are tiny ``.npy`` files written into tmp_path, read on the CPU by ``fn.readers.numpy``
(``device_id=None``). Sample ``i`` is ``[i, a, b, c]``: column 0 names the sample, the others are
the features of a linear regression.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Subset, TensorDataset

from tests.helpers.distributed import REPO_ROOT, run_ranks
from tests.helpers.models import QUIET
from tests.helpers.session_cache import once_per_session
from trainer import Trainer, TrainModule, seed_everything
from trainer.data.dali import DALILoader

dali = pytest.importorskip("nvidia.dali", reason="NVIDIA DALI is not installed (the `dali` extra)")
from nvidia.dali import fn, pipeline_def  # noqa: E402

BATCH = 2


def write_samples(root: Path, n: int) -> np.ndarray:
    """``n`` samples as root/s{i}.npy (sorted names = sample order); returns them stacked."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    rows = np.concatenate([np.arange(n, dtype=np.float32)[:, None], rng.normal(size=(n, 3)).astype(np.float32)], 1)
    for i, row in enumerate(rows):
        np.save(root / f"s{i:03d}.npy", row)
    return rows


@pipeline_def(batch_size=BATCH, num_threads=1, device_id=None, seed=7)
def samples(file_root: str, shard_id: int, num_shards: int, shuffle: bool = False, pad: bool = True) -> Any:
    return fn.readers.numpy(
        file_root=file_root,
        shard_id=shard_id,
        num_shards=num_shards,
        random_shuffle=shuffle,
        initial_fill=4,
        pad_last_batch=pad,
        name="reader",
    )


@pipeline_def(batch_size=BATCH, num_threads=1, seed=7)
def gpu_samples(file_root: str, shard_id: int, num_shards: int) -> Any:
    """`samples`, its batches copied to the GPU by DALI (``device_id`` given by the loader)."""
    return samples.__wrapped__(file_root, shard_id, num_shards).gpu()


@pipeline_def(batch_size=BATCH, num_threads=1, device_id=None)
def unsharded(file_root: str, shard_id: int, num_shards: int) -> Any:
    return fn.readers.numpy(file_root=file_root, pad_last_batch=True)


def ids(batch: dict[str, torch.Tensor]) -> list[int]:
    return batch["x"][:, 0].int().tolist()


# -- one process: the epoch plan of every shard and policy ----------------------------------------
@pytest.mark.parametrize(
    "policy, training, counts, full",
    [
        ("fill", True, [2, 2, 2, 2], True),  # shards padded to 3 samples: 2 full batches each
        ("drop", True, [1, 1, 1, 1], True),
        ("partial", True, [1, 1, 1, 1], False),  # the smallest shard's count on every rank
        ("partial", False, [1, 2, 1, 2], False),  # evaluation: every shard its own samples
    ],
)
def test_every_shard_gets_its_epoch_under_each_policy(tmp_path, policy, training, counts, full):
    """10 samples over 4 shards (2, 3, 2, 3 samples), batch 2, two epochs: the shards are disjoint,
    the reader moves every shard on by one per epoch, and only ``partial`` evaluation reads every
    sample exactly once."""
    write_samples(tmp_path, 10)
    loaders = [
        DALILoader(samples, ["x"], last_batch_policy=policy, file_root=str(tmp_path)).sharded(s, 4, training)
        for s in range(4)
    ]
    for epoch in range(2):
        lengths = [len(dl) for dl in loaders]
        assert lengths == (counts if epoch == 0 else counts[1:] + counts[:1])
        seen = [[ids(b) for b in dl] for dl in loaders]
        assert [len(batches) for batches in seen] == lengths
        if full:
            assert all(len(b) == BATCH for batches in seen for b in batches)
        per_shard = [set(i for b in batches for i in b) for batches in seen]
        assert sum(len(s) for s in per_shard) == len(set().union(*per_shard))  # disjoint
        if policy == "fill":
            assert set().union(*per_shard) == set(range(10))
        if not training:  # exact evaluation: every sample once, no empty batch
            assert sorted(i for batches in seen for b in batches for i in b) == list(range(10))
            assert all(batches and all(b for b in batches) for batches in seen)


def test_an_epoch_left_early_is_finished_before_the_next(tmp_path):
    """The loop may stop inside an epoch (limit_train_batches, max_steps); the next epoch still
    starts at the reader's epoch boundary, and a loader outside a Trainer reads shard 0 of 1."""
    write_samples(tmp_path, 10)
    loader = DALILoader(samples, ["x"], file_root=str(tmp_path))
    assert ids(next(iter(loader))) == [0, 1]
    assert [ids(b) for b in loader] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert loader.batch_size == BATCH and isinstance(next(iter(loader))["x"], torch.Tensor)


def test_state_dict_resumes_the_reader_exactly(tmp_path):
    """A state from an epoch's start replays that epoch; one from inside it continues with the
    next epoch (the rest of the interrupted one is read and dropped)."""
    write_samples(tmp_path, 10)

    def shard() -> DALILoader:
        return DALILoader(samples, ["x"], shuffle=True, file_root=str(tmp_path)).sharded(1, 2, True)

    straight = shard()
    at_start = straight.state_dict()
    it = iter(straight)
    epoch = [ids(next(it))]
    inside = straight.state_dict()
    epoch += [ids(b) for b in it]
    next_epoch = [ids(b) for b in straight]
    resumed = shard()
    resumed.load_state_dict(at_start)
    assert [ids(b) for b in resumed] == epoch
    resumed.load_state_dict(inside)
    assert [ids(b) for b in resumed] == next_epoch != epoch
    with pytest.raises(ValueError, match=r"saved state is shard \(1, 2\).*this loader is \(0, 2\)"):
        DALILoader(samples, ["x"], file_root=str(tmp_path)).sharded(0, 2, True).load_state_dict(inside)


# -- bad input --------------------------------------------------------------------------------------
def test_bad_definitions_and_arguments_get_clear_errors(tmp_path):
    write_samples(tmp_path, 10)
    root = str(tmp_path)
    with pytest.raises(TypeError, match="pipeline_fn must be a @pipeline_def function, got str"):
        DALILoader("samples", ["x"])
    with pytest.raises(TypeError, match="must take shard_id and num_shards"):
        DALILoader(pipeline_def(lambda file_root: fn.readers.numpy(file_root=file_root)), ["x"])
    with pytest.raises(TypeError, match="output_map must be a non-empty list of names"):
        DALILoader(samples, "x")
    with pytest.raises(ValueError, match="last_batch_policy must be one of"):
        DALILoader(samples, ["x"], last_batch_policy="pad")
    with pytest.raises(ValueError, match="num_shards is set by the Trainer"):
        DALILoader(samples, ["x"], num_shards=2)
    with pytest.raises(TypeError, match="not a DALI Pipeline: decorate"):
        len(DALILoader(lambda shard_id, num_shards, **kw: fn, ["x"]))
    with pytest.raises(ValueError, match="pipeline has 1 outputs but output_map names 2"):
        len(DALILoader(samples, ["x", "y"], file_root=root))
    with pytest.raises(ValueError, match="give the reader pad_last_batch=True"):
        len(DALILoader(samples, ["x"], pad=False, file_root=root))
    with pytest.raises(ValueError, match="reads shard 0 of 1, but this rank is shard 1 of 2"):
        len(DALILoader(unsharded, ["x"], file_root=root).sharded(1, 2, True))
    with pytest.raises(ValueError, match="no reader named 'other'"):
        len(DALILoader(samples, ["x"], reader_name="other", file_root=root))
    with pytest.raises(ValueError, match=r"gives no batch: the reader's 10 samples in 8 shards leave 1"):
        len(DALILoader(samples, ["x"], last_batch_policy="drop", file_root=root).sharded(0, 8, True))
    ragged = tmp_path / "ragged"
    ragged.mkdir()
    for i in range(2):
        np.save(ragged / f"s{i}.npy", np.zeros(3 + i, dtype=np.float32))
    with pytest.raises(ValueError, match="samples of output 'x' have different shapes"):
        next(iter(DALILoader(samples, ["x"], file_root=str(ragged))))


def test_without_dali_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # what an environment without DALI imports
    with pytest.raises(ImportError, match=r"pip install 'lockstep-trainer\[dali\]'"):
        DALILoader(samples, ["x"])


@pytest.mark.launches
def test_importing_trainer_does_not_import_dali():
    code = "import sys, trainer, trainer.data.dali; sys.exit('nvidia.dali' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT).returncode == 0


# -- two ranks through the Trainer ------------------------------------------------------------------
class Linear(TrainModule):
    """A linear regression on features 1..3 whose steps record the sample ids they trained."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(3, 1)
        self.seen: list[tuple[int, list[int]]] = []
        self.evaluated: list[int] = []

    def _loss(self, batch: Any) -> torch.Tensor:
        x = batch["x"] if isinstance(batch, dict) else batch[0]
        return nn.functional.mse_loss(self.net(x[:, 1:]).squeeze(1), x[:, 1:].sum(1) * 0.5 + 1.0)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x = batch["x"] if isinstance(batch, dict) else batch[0]
        self.seen.append((self.current_epoch, x[:, 0].int().tolist()))
        return self._loss(batch)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.evaluated += batch["x"][:, 0].int().tolist()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def _params(module: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def _fit(loader: Any, **kwargs: Any) -> tuple[Trainer, Linear]:
    module = Linear()
    trainer = Trainer(accelerator="cpu", **{**QUIET, **kwargs})
    trainer.fit(module, loader)
    return trainer, module


def _two_ranks(rank: int, world_size: int, even: str, odd: str, ckpt: str) -> dict[str, Any]:
    seed_everything(0)
    out: dict[str, Any] = {}
    # shuffled, 9 samples per shard (padded in each epoch's last batch), the reader moving shards
    shuffled = dict(shuffle=True, file_root=odd)
    _, straight = _fit(DALILoader(samples, ["x"], **shuffled), max_epochs=3)
    out["shuffled_seen"], out["straight"] = straight.seen, _params(straight)
    # the same run, stopped at the end of epoch 0 and inside epoch 1, resumed each time
    trainer, part = _fit(DALILoader(samples, ["x"], **shuffled), max_steps=5)
    out["resumed_seen"] = part.seen
    for step, max_steps in ((5, 7), (7, -1)):
        trainer.save_checkpoint(f"{ckpt}/{step}.ckpt")
        trainer, part = Trainer(accelerator="cpu", max_epochs=3, max_steps=max_steps, **QUIET), Linear()
        trainer.fit(part, DALILoader(samples, ["x"], **shuffled), ckpt_path=f"{ckpt}/{step}.ckpt")
        out["resumed_seen"] += part.seen
    out["resumed"] = _params(part)
    # DALI and a DataLoader over the same 16 samples in the same order: rank r's block of 8
    _, by_dali = _fit(DALILoader(samples, ["x"], last_batch_policy="drop", file_root=even), max_epochs=1)
    rows = torch.from_numpy(np.stack([np.load(p) for p in sorted(Path(even).glob("*.npy"))]))
    block = Subset(TensorDataset(rows), range(rank * 8, rank * 8 + 8))
    _, by_loader = _fit(DataLoader(block, batch_size=BATCH), max_epochs=1, use_distributed_sampler=False)
    out["dali"], out["dataloader"] = _params(by_dali), _params(by_loader)
    out["dali_seen"] = by_dali.seen
    # exact validation: 17 samples, 9 and 8 per rank, each read once
    module = Linear()
    Trainer(accelerator="cpu", **QUIET).validate(module, DALILoader(samples, ["x"], file_root=odd))
    out["evaluated"] = module.evaluated
    return out


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    def launch():
        root = tmp_path_factory.mktemp("dali")
        write_samples(root / "even", 16)
        write_samples(root / "odd", 17)
        return run_ranks(
            _two_ranks,
            init_group=False,
            args=(str(root / "even"), str(root / "odd"), str(root)),
            timeout=110,
        )

    return once_per_session(tmp_path_factory, "tests/data/test_dali.py::two_ranks", launch)


@pytest.mark.distributed
@pytest.mark.timeout(150)
def test_two_ranks_read_disjoint_shards_that_cover_the_data(two_ranks):
    """The Trainer gives rank r shard r of 2: every epoch the ranks' samples are disjoint and
    together all 17 (shuffled; `fill` repeats a shard's last sample up to 5 full batches); the
    evaluation reads every sample exactly once."""
    for epoch in range(3):
        mine = [[i for e, batch in r["shuffled_seen"] if e == epoch for i in batch] for r in two_ranks]
        assert [len(m) for m in mine] == [10, 10]  # 5 full batches on each rank
        assert not set(mine[0]) & set(mine[1])
        assert set(mine[0]) | set(mine[1]) == set(range(17))
    assert sorted(two_ranks[0]["evaluated"] + two_ranks[1]["evaluated"]) == list(range(17))
    assert [r["dali_seen"][0][1] for r in two_ranks] == [[0, 1], [8, 9]]  # contiguous blocks


@pytest.mark.distributed
@pytest.mark.timeout(150)
def test_dali_and_dataloader_in_the_same_order_train_the_same_parameters(two_ranks):
    for r in two_ranks:
        for a, b in zip(r["dali"], r["dataloader"]):
            assert torch.equal(a, b)
    for a, b in zip(two_ranks[0]["dali"], two_ranks[1]["dali"]):
        assert torch.equal(a, b)  # DDP kept the ranks equal


@pytest.mark.distributed
@pytest.mark.timeout(150)
def test_resume_at_and_inside_an_epoch_continues_the_pipeline_bitwise(two_ranks):
    """Stopped after 5 steps (the end of epoch 0), resumed, stopped after 7 (2 batches into
    epoch 1), resumed: the same batches and the same final parameters as the straight run, bit
    for bit."""
    for r in two_ranks:
        assert r["resumed_seen"] == r["shuffled_seen"]
        for a, b in zip(r["resumed"], r["straight"]):
            assert torch.equal(a, b)
