"""What every benchmark and experiment leaves behind: ``<name>.json``, ``<name>.png`` and the
table on stdout."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

Results = dict[str, Any]


def save_results(
    results: Results,
    out: Path,
    name: str,
    plot: Callable[[Results, Path], None],
    table: Callable[[Results], str],
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
    plot(results, out / f"{name}.png")
    print(table(results))
    print(f"\nwrote {out / f'{name}.json'} and {out / f'{name}.png'}")


def pyplot() -> Any:
    """matplotlib's pyplot drawing into files (the Agg backend: no display on a lab machine),
    imported when a plot is drawn, so that the runs themselves do not pay for it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path, dpi: int = 110) -> None:
    """Write a pyplot figure laid out tight, and free it."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
