"""Read the exact pip pins of envs/*.yaml, so a local venv installs what conda would.

Usage: python tools/pins.py envs/model.yaml envs/plots.yaml   -> one "name==version" a line.
Plain text parsing (no PyYAML needed before the venv exists); fails on a pin that is not
exact or on two files that pin one package differently.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PIN = re.compile(r"^\s*-\s+([A-Za-z0-9_.\-]+)==([A-Za-z0-9_.+\-]+)\s*$")


def read_pins(paths: list[str]) -> dict[str, str]:
    pins: dict[str, str] = {}
    for path in paths:
        in_pip = False
        for line in Path(path).read_text().splitlines():
            if re.match(r"^\s*-\s+pip:\s*$", line):
                in_pip = True
                continue
            if not in_pip or not line.strip() or line.strip().startswith("#"):
                continue
            match = PIN.match(line)
            if not match:
                raise SystemExit(f"{path}: not an exact pin: {line.strip()!r}")
            name, version = match.group(1).lower().replace("_", "-"), match.group(2)
            if pins.get(name, version) != version:
                raise SystemExit(f"{path}: {name} pinned to {version} and {pins[name]}")
            pins[name] = version
    return pins


if __name__ == "__main__":
    for name, version in read_pins(sys.argv[1:]).items():
        print(f"{name}=={version}")
