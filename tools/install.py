"""Install a requirements file into a venv with uv, falling back to pip.

Usage: python tools/install.py VENV REQUIREMENTS [--no-deps] [--installer uv|pip]
uv (the pin below, put into the venv by the venv's pip) installs the same exact pins as pip
several times faster. It does not read pip's configuration, so the indexes, find-links,
constraints and certificate that `pip config list` shows (files and PIP_* variables) are
handed to it as its own flags, and `--index-strategy unsafe-best-match` picks a version over
every index as pip does (a local `torch==2.13.0+cpu` wheel beside PyPI's). When uv cannot be
installed or its install fails, pip installs the same file and says why it took over.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

UV = "uv==0.13.9"
# pip's setting -> uv's flag; pip's values are lists separated by white space
UV_FLAGS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}
SETTING = re.compile(r"^[^.]*\.(?P<key>[a-z-]+)='(?P<value>.*)'$")  # scope.key='value'


def uv_options(pip_config: str) -> tuple[list[str], dict[str, str]]:
    """uv's flags and environment for the settings in `pip config list`'s output (lines
    `scope.key='value'`): every index, find-links folder and constraints file of every scope
    once, in order (where scopes disagree, uv sees them all, pip the highest one's); a `cert`
    as SSL_CERT_FILE."""
    flags, env, seen = [], {}, set()
    for line in pip_config.splitlines():
        match = SETTING.match(line.strip())
        if not match:
            continue
        key, value = match["key"], match["value"]
        if key == "cert":
            env["SSL_CERT_FILE"] = value
        elif key in UV_FLAGS:
            for item in value.split():
                if (key, item) not in seen:
                    seen.add((key, item))
                    flags += [UV_FLAGS[key], item]
    return flags, env


def with_uv(venv: Path, requirements: str, no_deps: bool, uv: str = UV) -> str | None:
    """Install with uv; None when done, else why uv could not (then pip is to install)."""
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    quiet = ["--quiet", "--disable-pip-version-check"]
    if subprocess.run([*pip, "install", *quiet, uv], check=False).returncode:
        return f"pip could not install {uv}"
    listed = subprocess.run([*pip, "config", "list"], capture_output=True, text=True, check=False)
    flags, env = uv_options(listed.stdout)
    command = [str(venv / "bin" / "uv"), "pip", "install", "--quiet", "--compile-bytecode"]
    command += ["--python", str(venv / "bin" / "python"), "--index-strategy", "unsafe-best-match"]
    command += [*flags, *(["--no-deps"] if no_deps else []), "-r", requirements]
    if subprocess.run(command, env={**os.environ, **env}, check=False).returncode:
        return "uv's install failed"
    return None


def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("venv", type=Path)
    parser.add_argument("requirements")
    parser.add_argument("--no-deps", action="store_true")
    parser.add_argument("--installer", choices=("uv", "pip"), default="uv")
    parser.add_argument("--uv", default=UV, help="uv's requirement (default: the pin)")
    args = parser.parse_args(arguments)
    if args.installer == "uv":
        why = with_uv(args.venv, args.requirements, args.no_deps, args.uv)
        if why is None:
            return 0
        print(f"tools/install.py: {why}; installing {args.requirements} with pip", file=sys.stderr)
    command = [str(args.venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    command += ["--disable-pip-version-check", *(["--no-deps"] if args.no_deps else [])]
    return subprocess.run([*command, "-r", args.requirements], check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
