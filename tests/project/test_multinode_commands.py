"""examples/slurm/torchrun_multinode.sh: its torchrun commands (the commented ones too) use real
torchrun options and real options of the example scripts they start, and the file is valid bash."""
from __future__ import annotations

import re
import shlex
import subprocess

from torch.distributed.run import get_args_parser

from tests.helpers.distributed import REPO_ROOT

SCRIPT = REPO_ROOT / "examples" / "slurm" / "torchrun_multinode.sh"


def _torchrun_commands() -> list[list[str]]:
    """Every `torchrun ...` in the file as its words after `torchrun` (continuation lines joined,
    comment signs dropped)."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    starts = (re.search(r"torchrun\s+--", line) for line in text.splitlines())
    return [shlex.split(found.string[found.start():])[1:] for found in starts if found]


def _example_options(script: str) -> set[str]:
    return set(re.findall(r'add_argument\(\s*"(--[\w-]+)"', (REPO_ROOT / script).read_text()))


def test_torchrun_commands_use_real_options_of_torchrun_and_the_examples():
    commands = _torchrun_commands()
    assert len(commands) == 4  # node 0, node 1, c10d on both, the SLURM job's
    for words in commands:
        script_at = next(i for i, word in enumerate(words) if word.endswith(".py"))
        torchrun_words, script, script_words = words[:script_at], words[script_at], words[script_at + 1:]
        # fails (SystemExit) on an option torchrun does not have
        parsed = get_args_parser().parse_args([*torchrun_words, script])
        assert parsed.nnodes in ("2", "${SLURM_NNODES}")
        assert (REPO_ROOT / script).is_file(), script
        used = {word for word in script_words if word.startswith("--")}
        assert used <= _example_options(script), (script, used - _example_options(script))


def test_the_job_script_is_valid_bash():
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
