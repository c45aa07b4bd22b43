"""The ctypes mirrors in mec_l4s against the BTF of the built BPF objects.

(``struct obs_sample`` is not in the observer's BTF: it only exists in the ring buffer;
test_observer_rules decodes real records with its mirror.)"""

from __future__ import annotations

import ctypes
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from l4s_support import MARKER_OBJ

from mec_l4s.efm import EfmConfig, EfmSock
from mec_l4s.observer import ObsConfig, ObsKey

OBSERVER_OBJ = MARKER_OBJ.with_name("efm_observer.bpf.o")


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


@pytest.mark.parametrize(
    ("obj", "name", "mirror"),
    [
        (MARKER_OBJ, "efm_config", EfmConfig),
        (MARKER_OBJ, "efm_sock", EfmSock),
        (OBSERVER_OBJ, "obs_config", ObsConfig),
        (OBSERVER_OBJ, "obs_key", ObsKey),
    ],
)
def test_structs_match_btf(obj: Path, name: str, mirror: type[ctypes.Structure]) -> None:
    btf = btf_structs(obj)[name]
    assert btf["size"] == ctypes.sizeof(mirror)
    fields = [f[0] for f in mirror._fields_]
    assert [m["name"] for m in btf["members"]] == fields
    for member in btf["members"]:
        assert member["bits_offset"] // 8 == getattr(mirror, member["name"]).offset
