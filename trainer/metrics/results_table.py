"""The table ``validate`` / ``test`` print on global rank 0 with ``verbose=True`` (Lightning's layout)."""
from __future__ import annotations

import shutil
from typing import Mapping, Sequence


def results_table(results: Sequence[Mapping[str, float]], stage: str) -> str:
    """One row per metric, one column per dataloader (``/dataloader_idx_N`` suffixes dropped)."""
    per_loader = [{k.split("/dataloader_idx_")[0]: v for k, v in r.items()} for r in results]
    metrics = sorted({k for r in per_loader for k in r})
    if not metrics:
        return ""
    headers = [f"{stage.capitalize()} metric", *(f"DataLoader {i}" for i in range(len(results)))]
    term = shutil.get_terminal_size(fallback=(120, 30)).columns or 120
    width = int(min(max(max(map(len, metrics)), max(map(len, headers)), 25), term / 2))
    row = f"{{:^{width}}}" * len(headers)
    bar = "─" * min(term, width * len(headers))
    lines = [bar, row.format(*headers).rstrip(), bar]
    for name in metrics:
        values = [str(r[name]) if name in r else " " for r in per_loader]
        lines.append(row.format(name, *values).rstrip())
    lines.append(bar)
    return "\n".join(lines)


def print_results(results: Sequence[Mapping[str, float]], stage: str) -> None:
    """Print `results_table` (nothing when no metric was logged)."""
    table = results_table(results, stage)
    if table:
        print(table)
