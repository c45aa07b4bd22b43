"""Research 001's Tables 7.2/7.3 (mean and std dev of each RTT method per WAN reorder rate)
assembled from the runs that carry them (issue 14), as the research did (its Table 8.2 RTTs
are its Table 7.2 delay-bit column):

- 0 %: Table 7.1's runs (``mts_lab.l4s.experiment``: spin and delay bit, no reordering);
- the delay bit at each rate: Table 8.2's runs (``mts_lab.l4s.tables8 --only 8.2``: the
  same bed and the same technique);
- the spin bit at each rate: ``mts_lab.l4s.experiment --reorder-pct ... --techniques spin``;
- optionally the spin bit with the endpoints' spin guard (``... --spin-guard``), as rows
  ``spin+guard/<cca>``.

Each row keeps its runs and run length (the sources may differ) and its source file.

    uv run python -m mts_lab.l4s.reorder --table-7-1 docs/results/l4s/table-7-1.json \\
        --tables-8 DIR/tables-8.json --spin DIR/table-7-2-3.json [--guard DIR/table-7-2-3.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mts_lab.l4s.bed import REPO
from mts_lab.l4s.experiment import PUBLISHED_REORDER, plot_reorder, table_reorder
from mts_lab.results import Results, save_results

# Table 8.2's per-flow fields (mts_lab.l4s.tables8._flow) under Table 7.1's names
FROM_TABLES8 = {
    "truth_mean_ms": "tcp_info_mean_ms",
    "truth_std_ms": "tcp_info_std_ms",
    "raw_mean_ms": "delay_raw_mean_ms",
    "raw_std_ms": "delay_raw_std_ms",
    "filtered_mean_ms": "delay_filtered_mean_ms",
    "filtered_std_ms": "delay_filtered_std_ms",
    "raw_vs_tcp_p90_ms": "delay_raw_vs_tcp_p90_ms",
    "filtered_vs_tcp_p90_ms": "delay_filtered_vs_tcp_p90_ms",
}
ROW_FIELDS = tuple(FROM_TABLES8)


def _row(fields: dict[str, Any], runs: int, seconds: float, source: Path) -> dict[str, Any]:
    return {f: fields[f] for f in ROW_FIELDS} | {
        "runs": runs,
        "seconds": seconds,
        "source": str(source),
    }


def _load(path: Path) -> Results:
    results: Results = json.loads(path.read_text())
    return results


def _experiment_rows(
    path: Path, tables: dict[str, Any], only: str | None = None, suffix: str = ""
) -> None:
    """The rows of an experiment file (Table 7.1's ``table`` at 0 %, or the reorder
    runs' ``tables`` per rate), of technique ``only`` (all if None), under
    ``<technique><suffix>/<cca>``."""
    results = _load(path)
    per_rate = results.get("tables") or {"0": results["table"]}
    for rate, rows in per_rate.items():
        for key, row in rows.items():
            technique, cca = key.split("/")
            if only is not None and technique != only:
                continue
            out = _row(row, row["runs"], results["seconds"], path)
            tables.setdefault(rate, {})[f"{technique}{suffix}/{cca}"] = out


def _tables8_rows(path: Path, tables: dict[str, Any]) -> None:
    """Table 8.2's delay-bit rows, per reorder rate."""
    results = _load(path)
    for entry in results["tables"].values():
        rate = entry["scenario"]["reorder_pct"]
        if entry["scenario"]["table"] != "8.2":
            continue
        for cca in ("prague", "cubic"):
            fields = {ours: entry[cca].get(theirs, [float("nan")] * 2)
                      for ours, theirs in FROM_TABLES8.items()}  # fmt: skip
            row = _row(fields, entry["runs"], results["seconds"], path)
            tables.setdefault(f"{rate:g}", {})[f"delay/{cca}"] = row


def assemble(
    table_7_1: Path, tables_8: Path | None, spin: Path | None, guard: Path | None
) -> Results:
    tables: dict[str, Any] = {}
    if spin is not None:
        _experiment_rows(spin, tables, only="spin")
    if guard is not None:
        _experiment_rows(guard, tables, only="spin", suffix="+guard")
    if tables_8 is not None:
        _tables8_rows(tables_8, tables)
    _experiment_rows(table_7_1, tables)  # last: its runs are the 0 % rows
    ordered = dict(sorted(tables.items(), key=lambda item: float(item[0])))
    sources = [str(p) for p in (table_7_1, tables_8, spin, guard) if p is not None]
    return {"tables": ordered, "published": PUBLISHED_REORDER, "sources": sources}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table-7-1", type=Path, required=True)
    parser.add_argument("--tables-8", type=Path, help="a tables-8.json with Table 8.2's runs")
    parser.add_argument("--spin", type=Path, help="a table-7-2-3.json of spin-bit runs")
    parser.add_argument("--guard", type=Path, help="the same with --spin-guard")
    parser.add_argument("--out", type=Path, default=REPO / "docs/results/l4s")
    args = parser.parse_args()
    results = assemble(args.table_7_1, args.tables_8, args.spin, args.guard)
    save_results(results, args.out, "table-7-2-3", plot_reorder, table_reorder)


if __name__ == "__main__":
    main()
