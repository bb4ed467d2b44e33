"""Issue 41 build item 5: under ``python -m trainer.as_lightning`` every process of the run sees
Lightning's names as Lockstep's: the ranks Lockstep launches (``devices=2`` with ``ddp``, ``ddp_spawn``),
ranks under torchrun started with the runner (or torchrun started under it), ``multiprocessing`` spawn and forkserver children, a
DataLoader's spawned worker, and all of these for ``-m package.module`` too.

tests/scripts/lightning_in_every_process.py is a Lightning script (``import lightning.pytorch as pl``);
each process it makes writes which Trainer ``lightning.pytorch.Trainer`` is there, and a rank also
the Trainer that fitted. Lightning 2.6.6 is installed, so a process that missed the alias would run
on it (and note ``lightning.pytorch.trainer.trainer``) rather than fail.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers.distributed import run_script
from tests.helpers.optional import importorskip

pytestmark = [pytest.mark.launches, pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(240)]
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "lightning_in_every_process.py"
RUNNER = ["-m", "trainer.as_lightning"]
LAUNCH_TIMEOUT_S = 180


def _seen(tmp_path: Path, args: list[str], launcher: str = "python") -> dict[str, list[str]]:
    """Run ``args`` from ``tmp_path``; every process's notes, by where it was (``rank0``, ``child``...)."""
    out = tmp_path / "seen"
    out.mkdir()
    done = run_script(args, launcher=launcher, env={"LOCKSTEP_TEST_OUT": str(out)}, timeout=LAUNCH_TIMEOUT_S,
                      cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    seen: dict[str, list[str]] = {}
    for note in out.glob("*.txt"):
        seen.setdefault(note.stem.rsplit("-", 1)[0], []).append(note.read_text())
    return seen


def _all_lockstep(seen: dict[str, list[str]]) -> bool:
    return all(module.startswith("trainer.") for notes in seen.values() for note in notes for module in note.split())


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_every_rank_lockstep_launches_runs_lockstep_s_trainer(tmp_path, strategy):
    seen = _seen(tmp_path, [*RUNNER, str(SCRIPT), strategy])
    assert sorted(seen) == ["loader", "rank0", "rank1"], seen
    assert [len(seen["rank0"]), len(seen["rank1"])] == [1, 1]
    assert _all_lockstep(seen), seen


@pytest.mark.parametrize("form", ["runner-in-torchrun", "torchrun-in-runner"])
def test_ranks_under_torchrun_started_with_the_runner_run_lockstep_s_trainer(tmp_path, form):
    if form == "runner-in-torchrun":  # torchrun -m trainer.as_lightning SCRIPT
        seen = _seen(tmp_path, [*RUNNER, str(SCRIPT), "ddp"], launcher="torchrun")
    else:  # python -m trainer.as_lightning -m torch.distributed.run SCRIPT: the workers start from PYTHONPATH
        torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
        seen = _seen(tmp_path, [*RUNNER, *torchrun, str(SCRIPT), "ddp"])
    assert sorted(seen) == ["loader", "rank0", "rank1"], seen
    assert _all_lockstep(seen), seen


def test_the_module_form_runs_lockstep_s_trainer_in_every_rank(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copy(SCRIPT, package / "train.py")
    seen = _seen(tmp_path, [*RUNNER, "-m", "pkg.train", "ddp"])
    assert sorted(seen) == ["loader", "rank0", "rank1"], seen
    assert _all_lockstep(seen), seen


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_multiprocessing_child_sees_lockstep(tmp_path, method):
    seen = _seen(tmp_path, [*RUNNER, str(SCRIPT), method])
    assert list(seen) == ["child"] and len(seen["child"]) == 1
    assert _all_lockstep(seen), seen


def test_a_spawned_dataloader_worker_sees_lockstep(tmp_path):
    seen = _seen(tmp_path, [*RUNNER, str(SCRIPT), "loader"])
    assert sorted(seen) == ["loader", "rank0"], seen
    assert _all_lockstep(seen), seen


def test_without_the_runner_the_script_runs_on_the_installed_lightning(tmp_path):
    """The script tells the two apart: a process that missed the alias notes Lightning's Trainer."""
    importorskip("lightning.pytorch")
    seen = _seen(tmp_path, [str(SCRIPT), "spawn"])
    assert seen == {"child": ["lightning.pytorch.trainer.trainer"]}


def test_a_trainer_of_one_device_in_a_rank_predicts_alone_as_in_lightning(tmp_path):
    """After a 2-rank fit, ``Trainer(devices=1)`` in each rank is a Trainer of that process alone (world 1,
    rank 0, the whole set predicted), as Lightning makes it (pytorch-forecasting's ``predict`` builds one)."""
    importorskip("lightning.pytorch")
    (tmp_path / "lightning").mkdir()
    (tmp_path / "lockstep").mkdir()
    theirs = _seen(tmp_path / "lightning", [str(SCRIPT), "ddp_then_alone"])
    ours = _seen(tmp_path / "lockstep", [*RUNNER, str(SCRIPT), "ddp_then_alone"])
    assert sorted(theirs["alone"]) == ["world=1 rank=0 predicted=8"] * 2, theirs
    assert sorted(ours["alone"]) == sorted(theirs["alone"])
    assert _all_lockstep({k: v for k, v in ours.items() if k != "alone"}), ours


def test_two_ranks_under_the_runner_train_on_lightning_s_shares(tmp_path):
    """Under the runner, 2 ranks over a shuffled loader train on Lightning's DistributedSampler shares
    (seed + epoch), so they end with the parameters Lightning's 2 ranks end with (Lockstep's own order,
    the one-process order, would give others): what the library census's 2-process rows compare."""
    importorskip("lightning.pytorch")
    (tmp_path / "lightning").mkdir()
    (tmp_path / "lockstep").mkdir()
    theirs = _seen(tmp_path / "lightning", [str(SCRIPT), "ddp_shuffled"])
    ours = _seen(tmp_path / "lockstep", [*RUNNER, str(SCRIPT), "ddp_shuffled"])
    assert len(theirs["params"]) == 2
    assert sorted(ours["params"]) == sorted(theirs["params"])
