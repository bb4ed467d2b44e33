"""Sharded FSDP checkpoints: one directory per checkpoint, atomic, async, resharding on load,
consolidation into one file. Real processes on CPU (gloo); one 2-rank run shared by the asserts.

96 samples, micro batch 4, A=2: at W=2 each rank has 12 batches an epoch, 6 steps; 12 steps in 2 epochs.
"""
from __future__ import annotations

import os
import re
import signal
import warnings

import pytest
import torch

from callbacks import Callback, ModelCheckpoint
from tests.helpers.distributed import run_ranks
from tests.helpers.models import QUIET
from tests.helpers.resume_models import Noisy, make_loader
from tests.helpers.session_cache import once_per_session
from trainer import FSDPStrategy, Trainer, seed_everything
from trainer.checkpoint_io.file_format import CheckpointError
from trainer.launch.preemption import Preempted
from trainer.checkpoint_io.sharded_layout import MANIFEST_FILE, META_FILE
from trainer.checkpoint_io.sharded_read import consolidate_checkpoint, consolidated

STOP_STEP = 9  # epoch 1, mid-epoch
PREEMPT_STEP = 11  # the pre-emption signalled after step 9 is agreed at step 11's end
CKPT_KW = {**QUIET, "enable_checkpointing": True}


class Logged(Noisy):
    """Noisy (dropout, AdamW, a per-step scheduler), logging its loss for top-k ranking."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))


def _strategy(**kw):
    return FSDPStrategy(auto_wrap_policy={torch.nn.Linear}, **kw)


def _full(module):
    """Every parameter gathered whole (a collective)."""
    return [p.full_tensor().detach().clone() for p in module.parameters()]


class Record(Callback):
    """Gathers the full parameters after the given global steps and at the start and end of training."""

    def __init__(self, steps=()):
        self.steps, self.at = set(steps), {}

    def on_train_start(self, trainer, module):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        self.at["start"] = _full(module)
        if trainer.optimizers[0].state:  # restored (torch would create a fresh one with a zero step)
            state = get_optimizer_state_dict(module, trainer.optimizers[0], options=StateDictOptions(full_state_dict=True))
            self.at["optimizer"] = torch.utils._pytree.tree_map_only(torch.Tensor, torch.clone, state)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step in self.steps and step not in self.at and trainer.fit_loop.batches_done % trainer.accumulate_grad_batches == 0:
            self.at[step] = _full(module)

    def on_train_end(self, trainer, module):
        self.at["end"] = _full(module)


class SaveAndPreempt(Callback):
    """Saves ``path`` after global step ``step`` (and gathers the full optimizer state), then
    rank 1 gets SIGUSR1: every rank agrees to a pre-emption two steps later (saves last.ckpt, exits)."""

    def __init__(self, step, path):
        self.step, self.path, self.optimizer_state = step, path, None

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step and trainer.fit_loop.batches_done % trainer.accumulate_grad_batches == 0:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

            trainer.save_checkpoint(self.path)
            state = get_optimizer_state_dict(module, trainer.optimizers[0], options=StateDictOptions(full_state_dict=True))
            self.optimizer_state = torch.utils._pytree.tree_map_only(torch.Tensor, torch.clone, state)
            if trainer.global_rank == 1:
                os.kill(os.getpid(), signal.SIGUSR1)


def _two_ranks(rank, world_size, tmp):
    torch.set_num_threads(1)
    kw = {"max_epochs": 2, "accumulate_grad_batches": 2, "accelerator": "cpu"}
    out = {}
    seed_everything(0)
    straight, record = Logged(), Record(steps=(2, 4, 6, 8, PREEMPT_STEP))
    Trainer(strategy=_strategy(), callbacks=[record], **kw, **QUIET).fit(straight, make_loader())
    out["straight"], out["straight_at"] = record.at["end"], record.at
    out["errors"] = _misuses(os.path.join(tmp, "misuse"))

    # asynchronous saves: the top 2 by train_loss every 2 steps and last.ckpt; mid.ckpt after step 9;
    # pre-empted after step 11 (mid-epoch), which saves last.ckpt
    seed_everything(0)
    ckpts = os.path.join(tmp, "ckpts")
    checkpoint = ModelCheckpoint(dirpath=ckpts, monitor="train_loss", save_top_k=2, every_n_train_steps=2, save_last=True)
    preempt = SaveAndPreempt(STOP_STEP, os.path.join(tmp, "mid.ckpt"))
    record = Record(steps=(STOP_STEP,))
    trainer = Trainer(strategy=_strategy(async_checkpoint=True), callbacks=[checkpoint, record, preempt], **kw, **CKPT_KW)
    with pytest.raises(Preempted):
        trainer.fit(Logged(), make_loader())
    out["saved"], out["saved_optimizer"] = record.at[STOP_STEP], preempt.optimizer_state
    out["best_k"] = {os.path.basename(p) for p in checkpoint.best_k_models}
    out["listing"] = sorted(os.listdir(ckpts))
    # read now: the restarted job below saves on, and its top-k may replace some of these
    out["are_dirs"] = [os.path.isdir(os.path.join(ckpts, name)) for name in out["listing"]]

    # the restarted job (restart_count 1) resumes from last.ckpt by itself: bitwise the straight run
    os.environ["TORCHELASTIC_RESTART_COUNT"] = "1"
    seed_everything(99)
    resumed = Logged()
    checkpoint = ModelCheckpoint(dirpath=ckpts, monitor="train_loss", save_top_k=2, every_n_train_steps=2, save_last=True)
    record = Record()
    trainer = Trainer(strategy=_strategy(), callbacks=[checkpoint, record], **kw, **CKPT_KW)
    trainer.fit(resumed, make_loader())
    del os.environ["TORCHELASTIC_RESTART_COUNT"]
    out["resumed"], out["resumed_start"], out["steps"] = record.at["end"], record.at["start"], trainer.global_step
    # evaluating a fresh module from ckpt_path="best" (a directory) reads it before the module is sharded
    out["best"] = checkpoint.best_model_path
    out["val"] = trainer.validate(Logged(), make_loader(), ckpt_path="best")
    return out


class FailAt(Callback):
    """Raises on every rank at global step 2; on the way out, asks for a checkpoint."""

    def __init__(self, path):
        self.path = path

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == 2:
            raise ValueError("boom")

    def on_exception(self, trainer, module, exc):
        trainer.save_checkpoint(self.path)


def _misuses(path):
    """What a sharded save says where it cannot write: after fit, and while the run fails."""
    kw = {"max_steps": 2, "accelerator": "cpu", **QUIET}
    trainer = Trainer(strategy=_strategy(), **kw)
    trainer.fit(Logged(), make_loader())
    errors = {}
    try:
        trainer.save_checkpoint(path)
    except RuntimeError as err:
        errors["after_fit"] = str(err)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            Trainer(strategy=_strategy(), callbacks=[FailAt(path)], **{**kw, "max_steps": 4}).fit(Logged(), make_loader())
        except ValueError:
            pass
    errors["failing"] = [str(w.message) for w in caught if "No checkpoint written" in str(w.message)]
    errors["exists"] = os.path.exists(path)
    return errors


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(the run's directory, each rank's results); the tests only read the directory."""
    def launch():
        tmp = str(tmp_path_factory.mktemp("fsdp_ckpt"))
        return tmp, run_ranks(_two_ranks, world_size=2, args=(tmp,), init_group=False, timeout=150)

    return once_per_session(tmp_path_factory, "tests/checkpointing/test_fsdp_checkpoint.py::run", launch)


@pytest.mark.distributed
def test_resume_at_the_same_world_size_is_bitwise(run):
    _, results = run
    for r in results:
        assert r["steps"] == 12
        assert all(torch.equal(a, b) for a, b in zip(r["resumed_start"], r["straight_at"][PREEMPT_STEP]))
        assert all(torch.equal(a, b) for a, b in zip(r["resumed"], r["straight"]))


@pytest.mark.distributed
def test_a_sharded_checkpoint_is_one_directory_of_every_ranks_shards(run):
    tmp, _ = run
    path = os.path.join(tmp, "mid.ckpt")
    assert sorted(os.listdir(path)) == sorted([".metadata", "__0_0.distcp", "__1_0.distcp", META_FILE, MANIFEST_FILE])
    meta = torch.load(os.path.join(path, META_FILE), weights_only=True)
    assert meta["global_step"] == STOP_STEP and meta["world_size"] == 2 and len(meta["rank_states"]) == 2
    assert not [name for name in os.listdir(tmp) if name.startswith(".")]  # no temporary left


@pytest.mark.distributed
def test_top_k_and_last_are_directories_and_async_saves_hold_their_step(run):
    tmp, results = run
    r = results[0]
    ckpts = os.path.join(tmp, "ckpts")
    # steps 2, 4, 6, 8, 10 saved; the three worst were deleted with their directories
    assert len(r["best_k"]) == 2 and r["listing"] == sorted(r["best_k"] | {"last.ckpt"})
    assert all(r["are_dirs"])
    kept = r["best_k"] & set(os.listdir(ckpts))
    assert kept
    for name in kept:  # written while training went on: each holds its own step's weights
        state = consolidated(os.path.join(ckpts, name))
        expected = r["straight_at"][state["global_step"]]
        assert all(torch.equal(a, b) for a, b in zip(state["state_dict"].values(), expected))


@pytest.mark.distributed
def test_consolidated_file_loads_with_torch_load_and_load_from_checkpoint(run, tmp_path):
    tmp, results = run
    saved, saved_optimizer = results[0]["saved"], results[0]["saved_optimizer"]
    out = consolidate_checkpoint(os.path.join(tmp, "mid.ckpt"), tmp_path / "full.ckpt")
    ckpt = torch.load(out, weights_only=True)
    assert ckpt["global_step"] == STOP_STEP
    assert all(torch.equal(a, b) for a, b in zip(ckpt["state_dict"].values(), saved))
    # the optimizer state numbered as optimizer.state_dict() numbers it, equal to the gathered one
    names = list(saved_optimizer["state"])
    for i, name in enumerate(names):
        for key, value in saved_optimizer["state"][name].items():
            assert torch.equal(ckpt["optimizer_states"][0]["state"][i][key], value), (name, key)
    model = Logged.load_from_checkpoint(out)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), saved))
    # a sharded directory directly: read whole in this process
    model = Logged.load_from_checkpoint(os.path.join(tmp, "mid.ckpt"))
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), saved))
    # and evaluation in one process from the best directory gives what the 2-rank evaluation gave
    assert os.path.isdir(results[0]["best"])
    single = Trainer(accelerator="cpu", **QUIET).validate(Logged(), make_loader(), ckpt_path=results[0]["best"])
    assert single[0]["val_loss"] == pytest.approx(results[0]["val"][0]["val_loss"], rel=1e-6)


@pytest.mark.launches
def test_consolidate_command_line(run, tmp_path):
    import subprocess
    import sys

    from tests.helpers.distributed import script_env

    tmp, results = run
    out = tmp_path / "cli.ckpt"
    done = subprocess.run(
        [sys.executable, "-m", "trainer.checkpointing.consolidate", os.path.join(tmp, "mid.ckpt"), str(out)],
        capture_output=True, text=True, timeout=60, env=script_env(None),
    )
    assert done.returncode == 0, done.stderr
    ckpt = torch.load(out, weights_only=True)
    assert all(torch.equal(a, b) for a, b in zip(ckpt["state_dict"].values(), results[0]["saved"]))


def test_consolidate_refuses_what_is_not_a_sharded_checkpoint(tmp_path):
    (tmp_path / "empty.ckpt").mkdir()
    with pytest.raises(CheckpointError, match="is not a sharded checkpoint directory"):
        consolidate_checkpoint(tmp_path / "empty.ckpt", tmp_path / "out.ckpt")


def _same_optimizer_state(a, b):
    return a["state"].keys() == b["state"].keys() and all(
        a["state"][k].keys() == b["state"][k].keys() and all(torch.equal(a["state"][k][n], b["state"][k][n]) for n in a["state"][k])
        for k in a["state"]
    ) and [g["lr"] for g in a["param_groups"]] == [g["lr"] for g in b["param_groups"]]


def _resume_elsewhere(rank, world_size, tmp, full, corrupt=None):
    """Resume the W=2 checkpoint at this world size for 2 steps; at W=1 also the reference: one
    process without FSDP from the consolidated file, from the same seed. With ``corrupt`` (a
    copy with flipped bytes in one shard) first a fit from it, which must fail before loading."""
    torch.set_num_threads(1)
    # b=4, A=2 on another world size: another global batch than the checkpoint's (continued, warned)
    kw = {"max_steps": STOP_STEP + 2, "accumulate_grad_batches": 2, "accelerator": "cpu",
          "allow_global_batch_change": True, **QUIET}
    refused = None
    if corrupt is not None:
        seed_everything(5)
        model = Logged()
        before = [p.detach().clone() for p in model.parameters()]
        try:
            Trainer(strategy=_strategy(), **kw).fit(model, make_loader(), ckpt_path=corrupt)
        except CheckpointError as err:
            # at W=1 a rank's shard is the whole parameter: the model must be as it was made
            local = [p.to_local() if hasattr(p, "to_local") else p for p in model.parameters()]
            refused = {"error": str(err), "unchanged": all(torch.equal(a, b) for a, b in zip(local, before))}
    seed_everything(5)
    record = Record()
    trainer = Trainer(strategy=_strategy(), callbacks=[record], **kw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Logged(), make_loader(), ckpt_path=os.path.join(tmp, "mid.ckpt"))
    out = {"start": record.at["start"], "optimizer": record.at["optimizer"], "end": record.at["end"],
           "steps": trainer.global_step, "warnings": [str(w.message) for w in caught], "refused": refused}
    # an ordinary single-file checkpoint (here the consolidated one) into the shards
    # one step past the file's: a resume with nothing to train runs no hook, so Record would see nothing
    record = Record()
    Trainer(strategy=_strategy(), callbacks=[record], **{**kw, "max_steps": STOP_STEP + 1}).fit(
        Logged(), make_loader(), ckpt_path=full
    )
    out["from_file"] = record.at
    if world_size == 4:  # into a 2-D (HSDP) mesh: shards within pairs, replicas across them
        record = Record()
        Trainer(strategy=_strategy(device_mesh=(2, 2)), callbacks=[record], **{**kw, "max_steps": STOP_STEP + 1}).fit(
            Logged(), make_loader(), ckpt_path=os.path.join(tmp, "mid.ckpt")
        )
        out["hsdp"] = record.at
    if world_size == 1:
        seed_everything(5)
        reference = Logged()
        Trainer(**kw).fit(reference, make_loader(), ckpt_path=full)
        out["reference"] = [p.detach().clone() for p in reference.parameters()]
    return out


@pytest.fixture(scope="module")
def full_file(run, tmp_path_factory):
    tmp, _ = run
    return consolidate_checkpoint(os.path.join(tmp, "mid.ckpt"), tmp_path_factory.mktemp("full") / "full.ckpt")


@pytest.mark.distributed
@pytest.mark.parametrize("world_size", [1, 4])
def test_resume_reshards_to_another_world_size(run, full_file, world_size, tmp_path):
    tmp, results = run
    saved, saved_optimizer = results[0]["saved"], results[0]["saved_optimizer"]
    corrupt = None
    if world_size == 1:
        corrupt = _corrupt_copy(os.path.join(tmp, "mid.ckpt"), tmp_path / "flipped.ckpt", "__1_0.distcp", "flip")
    outs = run_ranks(_resume_elsewhere, world_size=world_size, args=(tmp, full_file, corrupt), init_group=False, timeout=150)
    for out in outs:
        # every rank's new shards hold exactly the saved module and optimizer states
        assert all(torch.equal(a, b) for a, b in zip(out["start"], saved))
        assert _same_optimizer_state(out["optimizer"], saved_optimizer)
        assert out["steps"] == STOP_STEP + 2
        assert all(torch.equal(a, b) for a, b in zip(out["from_file"]["start"], saved))
        assert _same_optimizer_state(out["from_file"]["optimizer"], saved_optimizer)
        if world_size == 4:
            assert all(torch.equal(a, b) for a, b in zip(out["hsdp"]["start"], saved))
            assert _same_optimizer_state(out["hsdp"]["optimizer"], saved_optimizer)
        assert all(torch.isfinite(p).all() and not torch.equal(p, q) for p, q in zip(out["end"], saved))
    assert any("made with world size 2" in w for w in outs[0]["warnings"])
    if world_size == 1:  # the corrupt copy: refused before the module or the optimizer was touched
        refused = outs[0]["refused"]
        assert refused is not None and refused["unchanged"], refused
        assert "shard __1_0.distcp (written by rank 1) does not match its checksum" in refused["error"]
        assert "flipped.ckpt" in refused["error"]  # two more steps from those states: as one process without FSDP takes them
        for a, b in zip(outs[0]["end"], outs[0]["reference"]):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


@pytest.mark.distributed
def test_a_sharded_save_where_it_cannot_write_says_so(run):
    _, results = run
    errors = results[0]["errors"]
    assert "FSDPStrategy cannot write" in errors["after_fit"] and "only during fit" in errors["after_fit"]
    assert len(errors["failing"]) == 1 and "needs every rank" in errors["failing"][0]
    assert not errors["exists"]
    assert results[1]["errors"]["failing"] == []  # only global rank 0 tries


def test_sharded_save_to_a_url_is_refused_before_writing():
    from trainer.checkpoint_io.sharded_save import save_sharded

    with pytest.raises(CheckpointError, match=r"Sharded checkpoints are written to a local or shared filesystem; 'memory://ckpts/last.ckpt' is a URL"):
        save_sharded({"state_dict": {}, "optimizer_states": []}, "memory://ckpts/last.ckpt", rank=0)


def _killed_during_save(rank, world_size, tmp):
    """Rank 1 dies (SIGKILL) once its shards of the step-4 checkpoint are on disk, before the save completes."""
    import signal

    import torch.distributed.checkpoint as dcp

    torch.set_num_threads(1)
    if rank == 1:
        write, calls = dcp.FileSystemWriter.write_data, []

        def write_then_die(self, plan, planner):
            written = write(self, plan, planner)
            calls.append(self)
            if len(calls) == 3:  # step 2's checkpoint and last.ckpt, then step 4's
                written.wait()
                os.kill(os.getpid(), signal.SIGKILL)
            return written

        dcp.FileSystemWriter.write_data = write_then_die
    checkpoint = ModelCheckpoint(dirpath=tmp, every_n_train_steps=2, save_top_k=-1, save_last=True)
    Trainer(strategy=_strategy(timeout=20), callbacks=[checkpoint], max_steps=6, accelerator="cpu", **CKPT_KW).fit(
        Logged(), make_loader()
    )


@pytest.mark.distributed
def test_a_rank_killed_during_a_sharded_save_leaves_the_previous_checkpoint(tmp_path):
    with pytest.raises(AssertionError, match="rank 1"):
        run_ranks(_killed_during_save, world_size=2, args=(str(tmp_path),), init_group=False, timeout=90)
    visible = sorted(name for name in os.listdir(tmp_path) if not name.startswith("."))
    assert visible == ["epoch=0-step=2.ckpt", "last.ckpt"]  # the step-4 checkpoint is absent
    last = consolidated(tmp_path / "last.ckpt")
    assert last["global_step"] == 2
    model = Logged.load_from_checkpoint(tmp_path / "last.ckpt")
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), last["state_dict"].values()))


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_crafted_index_is_refused_and_not_executed(run, tmp_path):
    import pickle
    import shutil

    tmp, _ = run
    path = tmp_path / "evil.ckpt"
    shutil.copytree(os.path.join(tmp, "mid.ckpt"), path)
    marker = tmp_path / "pwned"
    (path / ".metadata").write_bytes(pickle.dumps(_Exploit(marker)))
    with pytest.raises(CheckpointError, match=r"Refused to load sharded checkpoint .*evil.ckpt.*posix.system.*weights_only=False"):
        Logged.load_from_checkpoint(path)
    assert not marker.exists()


def _corrupt_copy(src, dst, shard, how):
    """A copy of the sharded checkpoint ``src`` whose ``shard`` is truncated or has flipped bytes."""
    import shutil

    shutil.copytree(src, dst)
    file = os.path.join(dst, shard)
    data = bytearray(open(file, "rb").read())
    if how == "truncate":
        data = data[: len(data) // 2]
    else:  # the same size: only a checksum can tell
        data[len(data) // 2] ^= 0xFF
    with open(file, "wb") as f:
        f.write(data)
    return str(dst)


@pytest.mark.parametrize(
    ("shard", "how", "message"),
    [
        ("__0_0.distcp", "truncate", r"shard __0_0.distcp \(written by rank 0\) has \d+ bytes, \d+ expected"),
        ("__1_0.distcp", "flip", r"shard __1_0.distcp \(written by rank 1\) does not match its checksum"),
    ],
)
def test_a_corrupt_shard_is_refused_naming_the_checkpoint_and_the_shard(run, tmp_path, shard, how, message):
    tmp, _ = run
    path = _corrupt_copy(os.path.join(tmp, "mid.ckpt"), tmp_path / "bad.ckpt", shard, how)
    with pytest.raises(CheckpointError, match=r"Sharded checkpoint '.*bad.ckpt' \(read on rank 0\): " + message):
        consolidated(path)
    model = Logged()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(CheckpointError, match=message):
        Trainer(accelerator="cpu", **QUIET).validate(model, make_loader(), ckpt_path=path)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), before))


def test_a_truncated_shard_of_an_old_checkpoint_is_found_from_the_index_sizes(run, tmp_path):
    tmp, _ = run  # a checkpoint without shards.json (written before it existed): the index's sizes
    path = _corrupt_copy(os.path.join(tmp, "mid.ckpt"), tmp_path / "old.ckpt", "__1_0.distcp", "truncate")
    os.remove(os.path.join(path, MANIFEST_FILE))
    with pytest.raises(CheckpointError, match=r"shard __1_0.distcp \(written by rank 1\) has \d+ bytes"):
        consolidated(path)


def test_torchs_checkpoint_exception_becomes_a_checkpoint_error_and_is_reported(tmp_path, monkeypatch):
    """torch's CheckpointException is a BaseException: converted, and reported to the agent."""
    import json

    from torch.distributed.checkpoint.api import CheckpointException

    from trainer.checkpoint_io.integrity import named_errors as _named_errors
    from trainer.launch.failure_notes import record_for_elastic_agent

    raw = CheckpointException("save failed", {1: (OSError(28, "No space left on device"), None)})
    with pytest.raises(CheckpointError, match=r"Could not save sharded checkpoint 'x.ckpt' \(on rank 0\): rank 1: OSError: .*No space left"):
        with _named_errors("x.ckpt", 0, "save"):
            raise raw
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / "error.json"))
    record_for_elastic_agent(raw, 0)
    assert "CheckpointException" in json.loads((tmp_path / "error.json").read_text())["message"]["message"]


def test_a_crafted_index_never_imports_the_module_it_names(tmp_path, monkeypatch):
    """The module of a refused global is not imported: its import-time code does not run."""
    marker = tmp_path / "imported"
    (tmp_path / "lockstep_evil_index.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nclass Payload:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "crafted.ckpt"
    path.mkdir()
    torch.save({"state_dict": {}, "optimizer_states": []}, path / META_FILE)
    # Payload() pickled by hand (GLOBAL, EMPTY_TUPLE, NEWOBJ, STOP): nothing imports the module here
    (path / ".metadata").write_bytes(b"\x80\x02clockstep_evil_index\nPayload\n)\x81.")
    with pytest.raises(CheckpointError, match=r"Refused to load sharded checkpoint .*crafted.ckpt.*lockstep_evil_index.Payload"):
        Logged.load_from_checkpoint(path)
    assert not marker.exists()
    assert "lockstep_evil_index" not in __import__("sys").modules


def _short(text):  # pickle's SHORT_BINUNICODE
    data = text.encode()
    return b"\x8c" + bytes([len(data)]) + data


@pytest.mark.parametrize("module, name", [("torch.serialization", "os.system"), ("torch", "serialization.os.system"),
                                          ("torch", "load")])
def test_a_crafted_index_naming_a_torch_global_that_is_no_constant_is_refused(tmp_path, module, name):
    """torch's own modules are not trusted as a whole: only its dtypes, layouts and memory formats.
    (Protocol 4 resolves a dotted name: ``torch.serialization.os.system`` is ``os.system``.)"""
    marker = tmp_path / "pwned"
    path = tmp_path / "crafted.ckpt"
    path.mkdir()
    torch.save({"state_dict": {}, "optimizer_states": []}, path / META_FILE)
    # GLOBAL by STACK_GLOBAL, one argument, REDUCE: os.system("touch <marker>") if it were allowed
    (path / ".metadata").write_bytes(
        b"\x80\x04" + _short(module) + _short(name) + b"\x93" + _short(f"touch {marker}") + b"\x85R."
    )
    with pytest.raises(CheckpointError, match=rf"Refused to load sharded checkpoint .*crafted.ckpt.*needs "
                       rf"{re.escape(module)}\.{re.escape(name)}, which is not safe to unpickle"):
        Logged.load_from_checkpoint(path)
    assert not marker.exists()


@pytest.mark.parametrize("shard", ["../outside.distcp", "/abs/outside.distcp", ".."])
def test_a_crafted_index_naming_a_shard_outside_its_directory_is_refused(tmp_path, shard):
    import pickle

    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata, Metadata, MetadataIndex, TensorProperties, TensorStorageMetadata,
    )

    path = tmp_path / "crafted.ckpt"
    path.mkdir()
    (tmp_path / "outside.distcp").write_bytes(b"\0" * 64)  # there, so only the name can refuse it
    torch.save({"state_dict": {}, "optimizer_states": []}, path / META_FILE)
    size = torch.Size([4])
    index = Metadata(
        state_dict_metadata={"state_dict.w": TensorStorageMetadata(TensorProperties(torch.float32), size,
                                                                  [ChunkStorageMetadata(torch.Size([0]), size)])},
        storage_data={MetadataIndex("state_dict.w", torch.Size([0])): _StorageInfo(shard, 0, 16)},
    )
    (path / ".metadata").write_bytes(pickle.dumps(index))
    with pytest.raises(CheckpointError, match=rf"Sharded checkpoint .*crafted.ckpt.: a shard's name must be one path "
                       rf"component .*got '{re.escape(shard)}'\. Nothing was loaded\."):
        consolidated(path)


def _with_a_bytes_entry(src, dst, marker, key_prefix="state_dict."):
    """A copy of the sharded checkpoint ``src`` whose index turns its first tensor entry under
    ``key_prefix`` into a bytes entry holding a pickle that creates ``marker`` when unpickled,
    with its manifest rewritten to match (the sizes and checksums prove nothing about intent)."""
    import io
    import json
    import pickle
    import shutil

    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, MetadataIndex

    from trainer.checkpoint_io.integrity import _sha256

    shutil.copytree(src, dst)
    with open(os.path.join(dst, ".metadata"), "rb") as f:
        index = pickle.load(f)
    key = next(k for k in index.state_dict_metadata if k.startswith(key_prefix))
    if key_prefix == "state_dict.":  # meta.pt names it too, so the module's key check passes
        meta = torch.load(dst / META_FILE, weights_only=True)
        meta["state_dict"][key[len(key_prefix):]] = torch.empty(index.state_dict_metadata[key].size)
        torch.save(meta, dst / META_FILE)
    index.state_dict_metadata[key] = BytesStorageMetadata()
    for entry in [i for i in index.storage_data if i.fqn == key]:
        del index.storage_data[entry]
    payload = io.BytesIO()
    torch.save(_Exploit(marker), payload)
    (dst / "__9_0.distcp").write_bytes(payload.getvalue())
    index.storage_data[MetadataIndex(key)] = _StorageInfo("__9_0.distcp", 0, len(payload.getvalue()))
    with open(os.path.join(dst, ".metadata"), "wb") as f:
        pickle.dump(index, f)
    files = {name: {"size": os.path.getsize(dst / name), "sha256": _sha256(str(dst / name))}
             for name in sorted(os.listdir(dst)) if name != MANIFEST_FILE}
    (dst / MANIFEST_FILE).write_text(json.dumps({"files": files}))
    return key


class _Evaluated(Logged):
    test_step = Logged.validation_step

    def predict_step(self, batch, batch_idx):
        return self.net(batch[0])

    def val_dataloader(self):  # what `python -m trainer validate` evaluates without a DataModule
        return make_loader()


def _resume_from(rank, world_size, path):
    torch.set_num_threads(1)
    kw = {"max_steps": STOP_STEP + 2, "accumulate_grad_batches": 2, "accelerator": "cpu",
          "allow_global_batch_change": True, **QUIET}
    try:
        Trainer(strategy=_strategy(), **kw).fit(Logged(), make_loader(), ckpt_path=path)
    except CheckpointError as err:
        return str(err)
    return None


@pytest.mark.distributed
@pytest.mark.parametrize("entry", ["state_dict.", "optimizer_states."])
def test_a_bytes_entry_the_writer_never_writes_is_refused_and_not_executed(run, tmp_path, entry):
    """torch's load planner reads a bytes entry with a full torch.load: a crafted index must not
    get there through any entry point (a 2-rank FSDP resume, evaluation, loading, consolidation)."""
    tmp, _ = run
    path, marker = tmp_path / "bytes.ckpt", tmp_path / "pwned"
    key = _with_a_bytes_entry(os.path.join(tmp, "mid.ckpt"), path, marker, entry)
    refusal = rf"Refused to load sharded checkpoint '.*bytes.ckpt': its entry '{re.escape(key)}' is a bytes entry"
    errors = run_ranks(_resume_from, world_size=2, args=(str(path),), init_group=False, timeout=150)
    assert all(e is not None and re.search(refusal, e) for e in errors), errors
    for call in (
        lambda: _Evaluated.load_from_checkpoint(path),
        lambda: consolidated(path),
        lambda: consolidate_checkpoint(path, tmp_path / "out.ckpt"),
        lambda: Trainer(accelerator="cpu", **QUIET).validate(_Evaluated(), make_loader(), ckpt_path=path),
        lambda: Trainer(accelerator="cpu", **QUIET).test(_Evaluated(), make_loader(), ckpt_path=path),
        lambda: Trainer(accelerator="cpu", **QUIET).predict(_Evaluated(), make_loader(), ckpt_path=path),
        lambda: Trainer(accelerator="cpu", max_steps=1, **QUIET).fit(Logged(), make_loader(), ckpt_path=path),
    ):
        with pytest.raises(CheckpointError, match=refusal):
            call()
    # the command lines: `python -m trainer validate --ckpt_path DIR` and the consolidation tool
    pytest.importorskip("jsonargparse")
    from trainer.checkpointing.consolidate import main as consolidate_main
    from trainer.cli import main as cli_main

    with pytest.raises(CheckpointError, match=refusal):
        cli_main(["validate", "--model", f"{__name__}._Evaluated", "--trainer.accelerator", "cpu",
                  "--trainer.logger", "false", "--trainer.enable_progress_bar", "false", "--ckpt_path", str(path)])
    assert consolidate_main([str(path), str(tmp_path / "out.ckpt")]) != 0
    assert not marker.exists()
    assert not (tmp_path / "out.ckpt").exists()


def test_a_bytes_entry_read_anyway_goes_through_the_allow_list(run, tmp_path):
    """Below the index check: the load planner itself reads a bytes entry weights-only."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    from trainer.checkpoint_io.sharded_read import _load_planner

    tmp, _ = run
    path, marker = tmp_path / "bytes.ckpt", tmp_path / "pwned"
    key = _with_a_bytes_entry(os.path.join(tmp, "mid.ckpt"), path, marker)
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process"
        warnings.simplefilter("ignore")
        with pytest.raises(CheckpointException, match="(?s)Weights only load failed.*posix.system"):
            dcp.load({key: None}, storage_reader=dcp.FileSystemReader(str(path)), planner=_load_planner(True), no_dist=True)
    assert not marker.exists()
