"""Vendor the census projects' files, byte for byte, from local snapshots of their repositories.

``python -m tests.census.vendor`` writes ``tests/census/vendor/<project>/``: the script, its helper
files, the repository's LICENSE file and ``manifest.json`` (repo, paths, commit, license, sha256),
each file read with ``git show <commit>:<path>`` from ``$CENSUS_MIRROR/<owner>+<name>/repo``
(default ``/work/.mirror``). The folder is not committed: third-party code stays out of this
repository's history, pinned instead by `tests.census.projects` (repo, commit, path).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from tests.census.projects import PROJECTS, Project

VENDOR = Path(__file__).resolve().parent / "vendor"


def project_dir(project: Project) -> Path:
    """Where ``project``'s vendored files are."""
    return VENDOR / project.name


def script_path(project: Project) -> Path:
    """The vendored script ``project`` runs."""
    return project_dir(project) / Path(project.script).name


def is_vendored(project: Project) -> bool:
    """Whether ``project``'s files are vendored, as its manifest pins them."""
    return (project_dir(project) / "manifest.json").is_file()


def _git_show(project: Project, path: str) -> bytes:
    mirror = Path(os.environ.get("CENSUS_MIRROR", "/work/.mirror")) / project.repo.replace("/", "+") / "repo"
    return subprocess.run(["git", "--git-dir", str(mirror), "show", f"{project.commit}:{path}"],
                          check=True, capture_output=True).stdout


def _vendored_path(project: Project, path: str) -> Path:
    """Where ``path`` goes under `project_dir`: by name, or for a ``tree`` project's helper, at its place
    under the script's folder (the script imports it as a package)."""
    if project.tree and path in project.helpers:
        return Path(path).relative_to(Path(project.script).parent)
    return Path(Path(path).name)


def vendor(project: Project) -> None:
    """Write ``project``'s files and manifest under `project_dir`."""
    target = project_dir(project)
    target.mkdir(parents=True, exist_ok=True)
    files = {}
    for path in (project.script, *project.helpers, project.license_file):
        data = _git_show(project, path)
        destination = target / _vendored_path(project, path)
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(data)
        files[path] = hashlib.sha256(data).hexdigest()
    manifest = {"repo": project.repo, "commit": project.commit, "script": project.script,
                "license": project.license, "license_file": project.license_file, "sha256": files}
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


if __name__ == "__main__":
    for entry in PROJECTS.values():
        vendor(entry)
        print(f"vendored {entry.name}: {entry.repo}@{entry.commit[:10]} {entry.script}")
