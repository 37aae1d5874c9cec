"""The venv holds exactly what envs/*.yaml pin."""

import importlib.metadata
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from pins import read_pins  # noqa: E402


def test_installed_versions_equal_the_pins():
    envs = sorted(str(p) for p in (ROOT / "envs").glob("*.yaml") if p.stem != "citation")
    pins = read_pins(envs)
    assert {"torch", "transformers", "snakemake", "numpy", "scipy", "seaborn"} <= set(pins)
    for name, version in pins.items():
        installed = importlib.metadata.version(name).split("+")[0]  # torch's +cpu local tag
        assert installed == version, f"{name}: installed {installed}, pinned {version}"
