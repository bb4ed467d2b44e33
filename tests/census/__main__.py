"""``python -m tests.census [PROJECT ...]``: run the census and print its table.

Every project (or the named ones) runs under Lightning and under ``python -m trainer.as_lightning``'s
machinery (`tests.census.census`); the table gives project, repository, result and the reason of
each row that is not ``equal``. Projects not vendored yet are vendored first (`tests.census.vendor`).
"""
from __future__ import annotations

import sys

from tests.census.census import census_row
from tests.census.projects import PROJECTS
from tests.census.vendor import is_vendored, vendor


def main(names: list[str]) -> None:
    """Run the census over ``names`` (all projects if empty) and print the table as Markdown."""
    chosen = [PROJECTS[n] for n in names] if names else list(PROJECTS.values())
    print("| project | repository | integration | result | reason |")
    print("| --- | --- | --- | --- | --- |")
    counts: dict[str, int] = {}
    for project in chosen:
        if not is_vendored(project):
            vendor(project)
        verdict = census_row(project)
        counts[verdict.result] = counts.get(verdict.result, 0) + 1
        reason = verdict.reason.replace("|", "\\|").replace("\n", " ")
        print(f"| `{project.name}` | {project.repo} | {project.integration or '-'} | {verdict.result} | {reason} |",
              flush=True)
    repos = len({p.repo for p in chosen})
    summary = ", ".join(f"{counts.get(k, 0)} {k}" for k in ("equal", "differs", "fails"))
    print(f"\n{len(chosen)} projects from {repos} repositories: {summary}")


if __name__ == "__main__":
    main(sys.argv[1:])
