"""Issue 41 build item 9: the ecosystem scan's record (docs/ecosystem_scan.json, written by
``python -m tests.ecosystem.scan``) covers 50 or more registry packages built on Lightning, its table
in docs/migration.md is the record's, and every Lightning name those packages import still resolves
under ``python -m trainer.as_lightning``: re-checked from the record, with no download."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap

import pytest

from tests.ecosystem.scan import MIGRATION, RESULTS, TABLE_END, TABLE_START, _Uses, split, table
from tests.helpers.distributed import script_env

pytestmark = pytest.mark.timeout(300)


def _scanned() -> dict:
    results = json.loads(RESULTS.read_text())
    return {package: row for package, row in results["packages"].items() if "dropped" not in row}


def test_the_scan_covers_fifty_packages_and_the_docs_table_is_its_record():
    assert len(_scanned()) >= 50
    text = MIGRATION.read_text()
    recorded = text[text.index(TABLE_START) + len(TABLE_START):text.index(TABLE_END)].strip()
    assert recorded == table(json.loads(RESULTS.read_text())).strip()


@pytest.mark.launches
@pytest.mark.slow
def test_every_name_the_packages_import_resolves_under_the_runner(tmp_path):
    names = sorted({name for row in _scanned().values() for name in row["names"]})
    assert len(names) > 300
    (tmp_path / "names.json").write_text(json.dumps(names))
    done = subprocess.run(
        [sys.executable, "-m", "trainer.as_lightning", "-m", "tests.ecosystem.probe", str(tmp_path / "names.json")],
        env=script_env(None), capture_output=True, text=True, timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    unresolved = {name: kind for name, kind in seen.items() if kind.startswith("error")}
    assert not unresolved, unresolved


def test_the_scanner_reads_imports_attribute_chains_and_trainer_reads():
    source = textwrap.dedent('''
        import pytorch_lightning as pl
        import lightning.pytorch
        from lightning.pytorch.callbacks.early_stopping import EarlyStopping as ES
        from lightning_fabric.utilities import cloud_io
        from .local import thing
        class C(pl.callbacks.ModelCheckpoint):
            def on_fit_start(self, trainer, pl_module):
                trainer.fit_loop.epoch_loop.val_loop._data_source
                pl_module.trainer._checkpoint_connector.resume_start()
                cloud_io.get_filesystem("x")
                lightning.pytorch.utilities.rank_zero_only(print)
    ''')
    uses = _Uses()
    uses.visit(ast.parse(source))
    assert uses.references == {
        "pytorch_lightning:", "lightning.pytorch:", "lightning.pytorch.callbacks.early_stopping:EarlyStopping",
        "lightning_fabric.utilities:cloud_io", "pytorch_lightning:callbacks.ModelCheckpoint",
        "lightning_fabric.utilities:cloud_io.get_filesystem", "lightning:pytorch.utilities.rank_zero_only",
    }
    # each chain and the chains it reads on the way
    assert uses.trainer_reads == {"fit_loop", "fit_loop.epoch_loop", "fit_loop.epoch_loop.val_loop",
                                  "fit_loop.epoch_loop.val_loop._data_source", "_checkpoint_connector",
                                  "_checkpoint_connector.resume_start"}
    assert split("pytorch_lightning:callbacks.ModelCheckpoint.CHECKPOINT_NAME_LAST") == (
        "pytorch_lightning.callbacks:ModelCheckpoint", "CHECKPOINT_NAME_LAST")
    assert split("lightning:pytorch.utilities.rank_zero_only") == ("lightning.pytorch.utilities:rank_zero_only", "")
