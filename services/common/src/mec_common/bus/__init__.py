"""The three message-bus contracts of the suite, each a versioned model with its routing keys.

- ``mec_common.bus.rnis``: the RNIS feed (exchange ``rnis``), published by the RNIS adapter
  (Go), consumed by the PEP and the path manager through ``mec_common.radio_view``.
- ``mec_common.bus.backlog``: the PEP backlog feed (exchange ``pep``), published by the PEP,
  consumed by the path manager.
- ``mec_common.bus.flowrtt``: the flow-RTT feed (exchange ``flowrtt``), published by the
  flow-RTT observer service (``l4s/``), consumed by the PEP and the path manager through
  ``mec_common.flow_rtt_view``.

Their JSON Schemas are exported to ``docs/schemas/`` (``python -m mec_common.bus --export
docs/schemas``); each publisher's output is tested against them, and the consumers read
with the same models (``rnis-adapter/tests/test_feed.py``, ``pep/tests/test_inprocess.py``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mec_common.bus import backlog, flowrtt, rnis


def json_schemas() -> dict[str, dict[str, object]]:
    """File name → JSON Schema of every message type on the bus."""
    return rnis.json_schemas() | backlog.json_schemas() | flowrtt.json_schemas()


def export_schemas(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in json_schemas().items():
        path = directory / name
        path.write_text(json.dumps(schema, indent=2, ensure_ascii=False) + "\n")
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description="Export the bus contracts' JSON Schemas.")
    parser.add_argument("--export", type=Path, required=True, metavar="DIR")
    for path in export_schemas(parser.parse_args().export):
        print(path)
