"""Real launches of a small training script (tests/scripts/ddp_fit.py), the ways users launch:
torchrun (one node, and two simulated nodes on 127.0.0.1), `python script.py` with
`Trainer(devices=2)`, and `strategy="ddp_spawn"` (`python script.py` with `num_nodes=3` on each of
three nodes is tests/multinode, on real network namespaces);
plus a failing worker, and the launch errors (contradicting arguments, `python -c`, a module
defined in an interactive session).

Every launch trains `Regression` for 2 epochs on 32 samples with micro batch 4 per rank and no
shuffling, so each rank's final parameters must equal one process trained with batch 8.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.distributed import read_rank_results, run_ranks, run_script
from tests.helpers.models import QUIET, assert_params_close, one_process_regression

SCRIPT = str(Path(__file__).parents[1] / "scripts" / "ddp_fit.py")
REPO = str(Path(__file__).resolve().parents[2])
OUT = "LOCKSTEP_TEST_OUT"
TWO_NODES_PREPARED = ["node=0 local=0 global=0", "node=1 local=0 global=1"]  # once per node

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def reference():
    """One process, the global batch 2 * 4, same epochs: what every rank must end with."""
    return one_process_regression(8)


def _launch(tmp_path, *script_args, **kwargs):
    return run_script([SCRIPT, *script_args], env={OUT: str(tmp_path)}, cwd=REPO, **kwargs)


def _markers(stdout: str, name: str) -> list[tuple[int, str]]:
    """(pid, rank) of every `<name> pid=.. rank=..` line."""
    return [(int(pid), rank) for pid, rank in re.findall(rf"{name} pid=(\d+) rank=(\d+|None)", stdout)]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _check_ranks_equal_reference(results, reference, world_size=2):
    assert [r["global_rank"] for r in results] == list(range(world_size))
    assert {r["world_size"] for r in results} == {world_size}
    for r in results:
        assert r["global_step"] == reference["global_step"] == 8
        assert_params_close(r["params"], reference["params"], atol=1e-5)
        assert r["module_ranks"] == (r["global_rank"], r["local_rank"], r["node_rank"], r["world_size"])
    for a, b in zip(results[0]["params"], results[1]["params"]):
        assert torch.equal(a, b)  # DDP keeps the replicas bit-identical


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_torchrun_one_node(tmp_path, reference):
    proc = _launch(tmp_path, launcher="torchrun", nproc=2, timeout=120)
    assert proc.returncode == 0, proc.stderr
    results = read_rank_results(tmp_path)
    _check_ranks_equal_reference(results, reference)
    assert [(r["local_rank"], r["node_rank"], r["num_nodes"]) for r in results] == [(0, 0, 1), (1, 0, 1)]
    assert _lines(tmp_path / "prepare_data.txt") == ["node=0 local=0 global=0"]
    assert len(_lines(tmp_path / "rank_zero_only.txt")) == 1


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_python_script_with_devices_2_starts_workers_and_exits_inside_fit(tmp_path, reference):
    proc = _launch(tmp_path, "--devices", "2", launcher="python", timeout=120)
    assert proc.returncode == 0, proc.stderr
    starts, ends = _markers(proc.stdout, "START"), _markers(proc.stdout, "END")
    # The launching process (no RANK) ran the script up to fit; the two workers ran all of it.
    launcher = [pid for pid, rank in starts if rank == "None"]
    assert len(launcher) == 1 and sorted(rank for _, rank in starts) == ["0", "1", "None"]
    assert sorted(rank for _, rank in ends) == ["0", "1"]
    assert launcher[0] not in [pid for pid, _ in ends]
    fit_done = re.findall(r"FIT_DONE pid=(\d+)", proc.stdout)
    assert fit_done == [str(pid) for pid, rank in ends if rank == "0"]  # global zero only
    _check_ranks_equal_reference(read_rank_results(tmp_path), reference)
    assert _lines(tmp_path / "prepare_data.txt") == ["node=0 local=0 global=0"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ddp_spawn_copies_the_trained_model_back(tmp_path, reference):
    proc = _launch(
        tmp_path, "--devices", "2", "--strategy", "ddp_spawn", "--checkpointing",
        launcher="python", timeout=100,
    )
    assert proc.returncode == 0, proc.stderr
    # The workers run only trainer.fit; the launching process runs the rest of the script.
    assert [rank for _, rank in _markers(proc.stdout, "START")] == ["None"]
    assert [rank for _, rank in _markers(proc.stdout, "END")] == ["None"]
    [result] = read_rank_results(tmp_path)  # saved by the launching process
    assert result["global_step"] == reference["global_step"] == 8
    assert result["world_size"] == 2
    assert_params_close(result["params"], reference["params"], atol=1e-5)
    # rank 0's ModelCheckpoint state came back too (`trainer.test(ckpt_path="best")` needs it)
    assert result["best_model_path"] == str(tmp_path / "checkpoints" / "epoch=1-step=8.ckpt")
    assert Path(result["best_model_path"]).is_file()


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_two_nodes_prepare_data_once_per_node_rank_zero_once(tmp_path, reference):
    proc = _launch(tmp_path, launcher="torchrun", nproc=1, nnodes=2, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "=== node 1 ===" in proc.stdout  # run_script's two agents: both nodes' output comes back
    results = read_rank_results(tmp_path)
    _check_ranks_equal_reference(results, reference)
    assert [(r["node_rank"], r["local_rank"], r["num_nodes"]) for r in results] == [(0, 0, 2), (1, 0, 2)]
    assert sorted(_lines(tmp_path / "prepare_data.txt")) == TWO_NODES_PREPARED
    assert len(_lines(tmp_path / "rank_zero_only.txt")) == 1


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux scheduling controls")
def test_a_script_ending_right_after_fit_exits_cleanly(tmp_path):
    """The last statement is `fit`, and gloo's worker threads are starved of CPU (the script
    pins them with the main thread to one CPU, in the idle scheduling class): without waiting for
    them at exit, a worker still freeing the last collective's tensor aborts the process during
    interpreter shutdown (exit code -6) after training succeeded."""
    script = str(Path(__file__).parents[1] / "scripts" / "exit_right_after_fit.py")
    proc = run_script([script], launcher="torchrun", nproc=2, env={OUT: str(tmp_path)}, cwd=REPO, timeout=120)
    assert "terminate called" not in proc.stderr
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["global_step"] for r in read_rank_results(tmp_path)] == [2, 2]


def _root_cause(stderr: str) -> str:
    """The elastic agent's "Root Cause" section: it reads the traceback from the worker's error file."""
    assert "Root Cause (first observed failure):" in stderr, stderr[-4000:]
    return stderr.split("Root Cause (first observed failure):", 1)[1]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("launcher", ["torchrun", "python"])
def test_a_failing_worker_ends_the_run_fast_with_its_error(tmp_path, launcher):
    """Rank 1 raises at step 3. Under torchrun rank 0 is in DDP's all-reduce (gloo breaks it at
    once). Under the Trainer's own launcher rank 0 instead stalls, as in a collective waiting for
    the 30-minute process-group timeout: the elastic agent must stop it once rank 1 fails. (Rank 0
    catches the agent's SIGTERM for pre-emption, so the agent's SIGKILL 30 s later ends it.)"""
    extra = ("--devices", "2", "--stall-others") if launcher == "python" else ()
    fail = ("--fail-rank", "1", "--fail-step", "3")
    # A surviving rank that was not stopped would wait for the 30-minute group timeout: the
    # launch's own bound (240 s, far above any machine's time for the run) raises TimeoutExpired.
    proc = _launch(tmp_path, *extra, *fail, launcher=launcher, timeout=240)
    assert proc.returncode != 0
    if launcher == "torchrun":
        cause = _root_cause(proc.stderr)
        assert re.search(r"rank\s*: 1 \(local_rank: 1\)", cause)
    else:  # the Trainer's launcher reports the root cause itself, once, with the rank's position
        cause = proc.stderr[proc.stderr.index("[lockstep] worker rank"):]
        assert cause.startswith("[lockstep] worker rank 1 failed with exit code 1: RuntimeError: boom on rank 1\n")
        assert proc.stderr.count("[lockstep] worker rank 1 failed") == 1, proc.stderr[-4000:]
        assert 'raise RuntimeError(f"boom on rank {self.global_rank}")' in cause  # rank 1's own traceback
        assert "[lockstep] rank 1 failed at epoch 0, global step 3, batch index 3" in cause
    assert "RuntimeError: boom on rank 1" in cause
    assert "Traceback (most recent call last)" in cause  # the Trainer wrote TORCHELASTIC_ERROR_FILE
    assert "END pid=" not in proc.stdout and "FIT_DONE" not in proc.stdout


# The statement of the user's bug in tests/scripts/ddp_fit.py: each printed traceback shows it once.
_SHAPE_BUG = "return torch.ones(2, 3) @ torch.ones(2, 3)"


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("launcher", ["torchrun", "python"])
def test_a_users_error_on_one_rank_prints_its_traceback_once(tmp_path, launcher):
    """A shape bug in rank 1's training_step: its traceback reaches the output exactly once (the
    launcher's report: torchrun's Root Cause, or the Trainer's launcher's own), not also from the
    worker itself."""
    extra = ("--devices", "2") if launcher == "python" else ()
    proc = _launch(tmp_path, *extra, "--fail-rank", "1", "--fail-step", "3", "--fail-kind", "shape",
                   launcher=launcher, timeout=240)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert output.count(_SHAPE_BUG) == 1, output
    assert "[lockstep] rank 1 failed at epoch 0, global step 3, batch index 3" in output, output
    assert "mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)" in output


def _launcher_mismatch(rank, world_size):
    """Trainer arguments that contradict a 2-process launch (run_ranks sets torchrun's variables)."""
    from trainer import Trainer

    errors = {}
    for kwargs in ({"devices": 3}, {"num_nodes": 2}, {"strategy": "single_device"}):
        try:
            Trainer(accelerator="cpu", **kwargs, **QUIET)
        except Exception as err:  # noqa: BLE001 - the test checks type and message
            errors[str(kwargs)] = (type(err).__name__, str(err))
    adopted = Trainer(accelerator="cpu", devices="auto", strategy="ddp_spawn", **QUIET)  # under a launcher: no spawning
    return errors, adopted.world_size, adopted.strategy.launcher is None


@pytest.mark.timeout(90)
def test_trainer_arguments_that_contradict_the_launcher():
    errors, world, no_launcher = run_ranks(_launcher_mismatch, init_group=False, timeout=60)[1]
    kind, message = errors["{'devices': 3}"]
    assert kind == "ValueError"
    assert "Trainer(devices=3)" in message and "LOCAL_WORLD_SIZE" in message and "2 on this node" in message
    kind, message = errors["{'num_nodes': 2}"]
    assert kind == "ValueError" and "Trainer(num_nodes=2)" in message and "on 1 node(s)" in message
    kind, message = errors["{'strategy': 'single_device'}"]
    assert kind == "ValueError" and "runs a single process" in message
    assert world == 2 and no_launcher


@pytest.mark.parametrize("given", ["by name", "as an instance"])
def test_a_strategy_named_or_given_is_connected_the_same_way(given):
    """One set-up path (`Strategy.connect`): the launching process holds the job its launcher starts."""
    from trainer import DDPStrategy, Trainer
    from trainer.launch.launcher import ElasticLauncher

    strategy = "ddp" if given == "by name" else DDPStrategy()
    t = Trainer(accelerator="cpu", devices=2, strategy=strategy, sync_batchnorm=True,
                use_distributed_sampler=False, **QUIET)
    s = t.strategy
    assert isinstance(s, DDPStrategy) and isinstance(s.launcher, ElasticLauncher)
    assert (s.cluster_environment.world_size, s.cluster_environment.local_world_size) == (2, 2)
    assert (t.world_size, t.num_nodes, t.global_rank, t.local_rank) == (2, 1, 0, 0)
    assert (s.sync_batchnorm, s.use_distributed_sampler) == (True, False)
    assert not hasattr(s, "module")  # the model the loop calls is `s.model`


def test_a_strategy_knows_no_device_or_place_before_it_is_connected():
    from trainer import DDPStrategy, SingleDeviceStrategy, Trainer

    for strategy in (SingleDeviceStrategy(), DDPStrategy()):
        for read in ("accelerator", "cluster_environment", "root_device", "global_rank"):
            with pytest.raises(RuntimeError, match="is not connected yet: pass it to a Trainer"):
                getattr(strategy, read)
    given = DDPStrategy()
    t = Trainer(accelerator="cpu", devices=1, strategy=given, **QUIET)
    assert t.strategy is given and given.launcher is None
    assert given.accelerator.kind == "cpu" and given.cluster_environment.world_size == 1


@pytest.mark.timeout(60)
def test_devices_2_from_python_c_suggests_ddp_spawn():
    code = (
        "from tests.helpers.models import QUIET, Regression, loader, regression_data\n"
        "from trainer import Trainer\n"
        "Trainer(devices=2, **QUIET).fit(Regression(), loader(regression_data(8), 4))\n"
        "print('NOT REACHED')\n"
    )
    proc = run_script(["-c", code], launcher="python", cwd=REPO, timeout=50)
    assert proc.returncode == 1
    assert "NOT REACHED" not in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: Trainer(devices=2) starts its workers by re-running your script")
    assert "sys.argv[0]='-c'" in last and "use strategy='ddp_spawn'" in last and "torchrun" in last


@pytest.mark.timeout(10)
def test_workers_rerun_python_dash_m_as_a_module(monkeypatch):
    """`python -m pkg.train` is re-run as `-m pkg.train`, which keeps relative imports working."""
    import importlib.machinery
    import types

    from trainer.launch.launcher import _worker_args

    main = types.ModuleType("__main__")
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", ["/src/pkg/train.py", "--devices", "2"])
    main.__spec__ = importlib.machinery.ModuleSpec("pkg.train", None)
    assert _worker_args() == ["-m", "pkg.train", "--devices", "2"]
    main.__spec__ = importlib.machinery.ModuleSpec("pkg.__main__", None)  # python -m pkg
    assert _worker_args() == ["-m", "pkg", "--devices", "2"]
    main.__spec__ = None  # python /src/pkg/train.py
    assert _worker_args() == ["/src/pkg/train.py", "--devices", "2"]


@pytest.mark.timeout(60)
def test_ddp_spawn_of_a_module_defined_in_an_interactive_session_is_a_clear_error():
    """A notebook's (or `python -c`'s) classes cannot be imported by spawned workers: say so up front."""
    code = (
        "import torch\n"
        "from tests.helpers.models import QUIET, Regression, loader, regression_data\n"
        "from trainer import Trainer\n"
        "class Local(Regression):\n"
        "    pass\n"
        "Trainer(devices=2, strategy='ddp_spawn', **QUIET).fit(Local(), loader(regression_data(8), 4))\n"
    )
    proc = run_script(["-c", code], launcher="python", cwd=REPO, timeout=50)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: strategy='ddp_spawn' runs the Trainer in new Python processes")
    assert "but Local is defined in this interactive session" in last and "Move it into a .py file" in last
