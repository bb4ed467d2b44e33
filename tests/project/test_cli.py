"""``python -m trainer``: YAML configs, overrides, ``--print_config``, errors, and 2-process runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
import torch

from tests.helpers.distributed import REPO_ROOT, free_port

pytest.importorskip("jsonargparse", reason="python -m trainer needs the 'cli' extra (jsonargparse)")
pytest.importorskip("sklearn", reason="the digits example needs scikit-learn (the 'dev' extra)")

from trainer.checkpoint_io.file_format import load_checkpoint  # noqa: E402
from trainer import TrainModule  # noqa: E402
from trainer.cli import LightningCLI, main  # noqa: E402

CONFIG = """\
seed_everything: 0
trainer:
  accelerator: cpu
  max_epochs: 1
  limit_train_batches: 8
  limit_val_batches: 1
  num_sanity_val_steps: 0
  enable_progress_bar: false
  log_every_n_steps: 2
  default_root_dir: run
model:
  class_path: examples.digits.DigitsCNN
  init_args:
    lr: 0.003
data:
  class_path: examples.digits.DigitsData
  init_args:
    batch_size: 16
"""


def _cli(tmp_path, *args, timeout=240):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "trainer", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=timeout,
    )


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(CONFIG)
    return str(path)


def test_a_yaml_config_trains_and_a_flag_overrides_it(tmp_path, config):
    # In this process: `python -m trainer` as a fresh process is test_two_processes_from_the_cli.
    main(["fit", "--config", config, "--model.lr", "0.01", "--trainer.max_steps", "5"])
    log_dir = tmp_path / "run" / "logs" / "version_0"
    assert sorted(os.listdir(log_dir / "checkpoints")) == ["epoch=0-step=5.ckpt", "last.ckpt"]  # max_steps=5 won over 8 batches
    checkpoint = load_checkpoint(log_dir / "checkpoints" / "epoch=0-step=5.ckpt")
    assert checkpoint["hyper_parameters"]["lr"] == 0.01 and checkpoint["global_step"] == 5
    saved = (log_dir / "config.yaml").read_text()
    assert "lr: 0.01" in saved and "max_steps: 5" in saved and "class_path: examples.digits.DigitsData" in saved

    # the saved config reproduces the run's arguments: validate the checkpoint with it
    cli = main(["validate", "--config", str(log_dir / "config.yaml"),
                "--ckpt_path", str(log_dir / "checkpoints" / "epoch=0-step=5.ckpt"), "--trainer.logger", "false"])
    assert "val_acc" in cli.trainer.callback_metrics


def test_print_config_round_trips(tmp_path, config, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--config", config, "--trainer.max_epochs", "4", "--print_config"])
    assert exit_.value.code == 0
    printed = capsys.readouterr().out
    assert "max_epochs: 4" in printed and "weight_decay: 0.0001" in printed  # complete: defaults too
    full = tmp_path / "full.yaml"
    full.write_text(printed)
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(full), "--print_config"])
    assert capsys.readouterr().out == printed


HELP_LINE = "`python -m trainer fit --help` lists the options.\n"


@pytest.mark.parametrize(
    "extra, first_line",
    [
        (["--trainer.max_epoch", "3"],  # no prefix matching of max_epochs, but the hint names it
         "unrecognized arguments: --trainer.max_epoch 3 (did you mean `--trainer.max_epochs`?)"),
        (["--trainer.acelerator=cpu"],
         "unrecognized arguments: --trainer.acelerator=cpu (did you mean `--trainer.accelerator`?)"),
        (["--zzz", "1"], "unrecognized arguments: --zzz 1"),
        (["--trainer.max_epochs", "three"], 'Parser key "trainer.max_epochs":'),
    ],
)
def test_a_bad_key_or_type_fails_with_the_error_line_first(tmp_path, config, capsys, extra, first_line):
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--config", config, *extra])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "python -m trainer fit: error: " + first_line
    assert err.endswith(HELP_LINE) and "usage:" not in err  # the usage only on --help


def test_a_misspelled_init_argument_of_the_model_is_named_with_the_closest(tmp_path, config, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--config", config, "--model.lrr", "0.1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith('python -m trainer fit: error: Parser key "model":\n')
    assert "Option 'lrr' is not accepted (did you mean `lr`?)\n" in err and err.endswith(HELP_LINE)


def test_a_misspelled_key_in_a_yaml_file_is_named(tmp_path, config, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  max_epoch: 1\n")
    with pytest.raises(SystemExit):
        main(["fit", "--config", config, "--config", str(bad)])
    assert capsys.readouterr().err == (  # LightningCLI's subcommand parser
        "python -m trainer fit: error: Subcommand 'fit' does not accept option 'trainer.max_epoch' "
        "(did you mean `trainer.max_epochs`?)\n" + HELP_LINE
    )


def test_a_trainer_argument_of_a_bad_value_is_a_one_line_usage_error(tmp_path, config, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--config", config, "--trainer.global_batch_size", "0"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == "python -m trainer fit: error: ValueError: global_batch_size must be None or an int >= 1, got 0\n"
    assert not (tmp_path / "run").exists()


def _files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files)


@pytest.mark.parametrize("entry", ["main", "LightningCLI"])
def test_a_refused_run_writes_nothing(tmp_path, config, entry):
    """``--trainer.global_batch_size 3`` with micro batch 2: refused before any step, and no file is left
    (the configuration is written when the stage starts, after the refusal)."""
    from trainer import GlobalBatchError

    args = ["fit", "--config", config, "--trainer.global_batch_size", "3", "--data.init_args.batch_size", "2"]
    with pytest.raises(GlobalBatchError, match="2 does not divide 3"):
        main(args) if entry == "main" else LightningCLI(args=args, seed_everything_default=0)
    assert not (tmp_path / "run" / "logs").exists() and _files(tmp_path / "run") == []


@pytest.mark.launches
def test_a_refused_run_from_python_m_trainer_writes_nothing(tmp_path, config):
    done = _cli(tmp_path, "fit", "--config", config, "--trainer.global_batch_size", "3", "--data.init_args.batch_size", "2")
    assert done.returncode == 1 and "GlobalBatchError" in done.stderr and "No step was taken" in done.stderr
    assert not (tmp_path / "run" / "logs").exists() and _files(tmp_path / "run") == []


BEST_UNKNOWN = (
    "ckpt_path='best' is unknown: no fit has run in this process (or none saved a checkpoint), so no "
    "ModelCheckpoint has a best checkpoint"
)


def test_ckpt_path_best_without_a_fit_is_a_one_line_error(tmp_path, config, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["validate", "--config", config, "--ckpt_path", "best"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert BEST_UNKNOWN in err and "--ckpt_path path/to/file.ckpt" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.launches
def test_ckpt_path_best_in_a_fresh_process_ends_without_a_traceback(tmp_path, config):
    done = _cli(tmp_path, "validate", "--config", config, "--ckpt_path", "best")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m trainer validate: error: " + BEST_UNKNOWN)
    assert "--ckpt_path path/to/file.ckpt" in last


@pytest.mark.parametrize(
    "args, error",
    [
        (["train"], "unknown subcommand 'train'"),
        (["valdate"], "unknown subcommand 'valdate' (did you mean `validate`?)"),
        ([], "a subcommand is needed"),
    ],
)
def test_unknown_subcommand(capsys, args, error):
    with pytest.raises(SystemExit) as exit_:
        main(args)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.splitlines()[0] == "python -m trainer: error: " + error
    assert err.splitlines()[1].startswith("usage: python -m trainer {fit,validate,test,predict}")


@pytest.mark.distributed
@pytest.mark.parametrize("launch", ["self", "torchrun"])
def test_two_processes_from_the_cli(tmp_path, config, launch):
    if launch == "self":
        args = ["fit", "--config", config, "--trainer.devices", "2"]
        done = _cli(tmp_path, *args)
    else:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
        done = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
             "--master_port", str(free_port()), "-m", "trainer", "fit", "--config", config],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    log_dir = tmp_path / "run" / "logs" / "version_0"
    assert sorted(os.listdir(tmp_path / "run" / "logs")) == ["version_0"]  # one run, one config
    checkpoint = load_checkpoint(log_dir / "checkpoints" / "epoch=0-step=8.ckpt")
    assert checkpoint["world_size"] == 2
    assert "class_path: examples.digits.DigitsCNN" in (log_dir / "config.yaml").read_text()



class _Loose(TrainModule):
    """A module as users write them: one parameter untyped, one typed ``Any``."""

    def __init__(self, backbone=None, head: Any = None, width: int = 4):
        super().__init__()
        self.net = torch.nn.Linear(width, 1)


def _popen(marker):
    return {"class_path": "subprocess.Popen", "init_args": {"args": f"touch {marker}", "shell": True}}


def _file_handler(marker):
    """A class no denylist names whose construction creates ``marker`` at once (Popen's command runs later)."""
    return {"class_path": "logging.FileHandler", "init_args": {"filename": str(marker)}}


def _leaf_keys(namespace, prefix=""):
    for key, value in vars(namespace).items():
        if hasattr(value, "__dict__") and type(value).__name__ == "Namespace" and "class_path" not in vars(value):
            yield from _leaf_keys(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def test_the_issue_config_runs_no_command(tmp_path, config, capsys):
    """``trainer.plugins: {class_path: subprocess.Popen, ...}`` is a usage error: nothing built (the
    argument takes Python objects, so the parser passes the mapping on unbuilt and the Trainer refuses it)."""
    import yaml

    marker = tmp_path / "pwned"
    bad = tmp_path / "plugins.yaml"
    bad.write_text(yaml.safe_dump({"trainer": {"plugins": _popen(marker)}}))
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--config", config, "--config", str(bad)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Trainer(plugins=[{'class_path': 'subprocess.Popen'" in err
    assert len(err.splitlines()) == 1
    assert not marker.exists() and not (tmp_path / "run").exists()


def test_no_cli_argument_builds_a_class_its_type_does_not_name(tmp_path, monkeypatch):
    """Every argument of the parser (the Trainer's, the module's untyped and ``Any`` ones, the
    optimizer's, the scheduler's, the data's) given a class path its type does not name: none is built."""
    monkeypatch.chdir(tmp_path)
    base = ["--trainer.accelerator=cpu", "--trainer.logger=false", "--trainer.enable_progress_bar=false"]
    cli = LightningCLI(_Loose, run=False, args=base, save_config_callback=None)
    keys = [k for k in _leaf_keys(cli.config) if k != "config"] + ["trainer.callbacks", "model", "data"]
    assert {"trainer.plugins", "trainer.strategy", "model.backbone", "model.head", "optimizer", "lr_scheduler"} <= set(keys)
    accepted = []
    for n, key in enumerate(keys):
        marker = tmp_path / f"built-{n}"
        try:
            cli.config = cli.parser.parse_args([*base, f"--{key}={json.dumps(_file_handler(marker))}"])
            cli.instantiate_classes()
        except (SystemExit, Exception):  # refused: at parsing, or by the object that got the value
            pass
        else:
            accepted.append(key)
        assert not marker.exists(), f"--{key} built logging.FileHandler"
    # a spec under an untyped or Any parameter arrives as data, never as an object
    assert set(accepted) <= {"model.backbone", "model.head", "trainer.default_root_dir"}, accepted


def test_a_crafted_checkpoint_state_resumed_from_the_cli_deletes_nothing_outside(tmp_path, config):
    """Issue 33 item 3 through ``python -m trainer fit --ckpt_path``: a checkpoint whose
    ModelCheckpoint state names this run's directory but lists files outside it for eviction."""
    main(["fit", "--config", config, "--trainer.max_steps", "2"])
    first = tmp_path / "run" / "logs" / "version_0" / "checkpoints" / "last.ckpt"
    victim = tmp_path / "theirs.ckpt"
    victim.write_text("keep me")
    checkpoint = torch.load(first, weights_only=True)
    (key,) = [k for k in checkpoint["callbacks"] if k.startswith("ModelCheckpoint")]
    resumed_dir = os.path.join("run", "logs", "version_1", "checkpoints")  # where the resumed run writes (cwd: tmp_path)
    checkpoint["callbacks"][key].update(
        dirpath=resumed_dir, best_k_models={str(victim): 9.0}, kth_best_model_path=str(victim),
        best_model_path=str(victim), last_model_path=str(victim),
    )
    crafted = tmp_path / "crafted.ckpt"
    torch.save(checkpoint, crafted)
    with pytest.warns(UserWarning, match="names paths outside its directory"):
        main(["fit", "--config", config, "--trainer.max_steps", "4", "--ckpt_path", str(crafted)])
    assert victim.read_text() == "keep me"
    assert sorted(os.listdir(resumed_dir)) == ["epoch=0-step=4.ckpt", "last.ckpt"]


def test_the_docs_test_command_on_the_example_config_runs(tmp_path, monkeypatch):
    """docs/cli.md's `python -m trainer test --config examples/digits.yaml`: DigitsCNN has a test_step."""
    monkeypatch.chdir(tmp_path)
    cli = main(["test", "--config", str(REPO_ROOT / "examples" / "digits.yaml"), "--trainer.accelerator", "cpu",
                "--trainer.logger", "false", "--trainer.enable_progress_bar", "false"])
    assert set(cli.trainer.callback_metrics) == {"test_loss", "test_acc"}
