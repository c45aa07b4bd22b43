"""The ctypes mirrors in mec_l4s.efm against the BTF of the built BPF objects."""

from __future__ import annotations

import ctypes
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from l4s_support import MARKER_OBJ

from mec_l4s.efm import EfmConfig, EfmSock


def btf_structs(obj: Path) -> dict[str, dict[str, Any]]:
    assert obj.exists(), f"{obj} missing: make {obj.relative_to(obj.parents[2])}"
    out = subprocess.run(
        ["bpftool", "btf", "dump", "file", str(obj), "-j"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    return {t["name"]: t for t in json.loads(out)["types"] if t.get("kind") == "STRUCT"}


@pytest.mark.parametrize(("name", "mirror"), [("efm_config", EfmConfig), ("efm_sock", EfmSock)])
def test_marker_structs_match_btf(name: str, mirror: type[ctypes.Structure]) -> None:
    btf = btf_structs(MARKER_OBJ)[name]
    assert btf["size"] == ctypes.sizeof(mirror)
    fields = [f[0] for f in mirror._fields_]
    assert [m["name"] for m in btf["members"]] == fields
    for member in btf["members"]:
        assert member["bits_offset"] // 8 == getattr(mirror, member["name"]).offset
