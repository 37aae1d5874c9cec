"""The checking tools: tools/compare_results.py (two results folders) and tools/check_store.py
(a hidden-state store against a fresh forward), on constructed files with known answers."""

import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import torch

from attnscope.core.store import HiddenStates
from attnscope.model.extract import ExtractSettings, extract
from conftest import tiny_model, write_tiny_encoded

TOOLS = Path(__file__).parents[1] / "tools"


def compare(before: Path, after: Path, *options: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(TOOLS / "compare_results.py"), str(before), str(after)]
    return subprocess.run([*command, *options], capture_output=True, text=True)


def bfloat16_bits(values) -> np.ndarray:
    """The bfloat16 bits of values that bfloat16 holds exactly, as a bfloat16 store keeps them."""
    return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def write_bfloat16_store(folder: Path, values) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with h5py.File(folder / "hidden_states.h5", "w") as f:
        f["hidden/0"] = bfloat16_bits(values)
        f["hidden/0"].attrs["encoding"] = "bfloat16"


def test_bfloat16_stores_compare_as_values_within_rtol(tmp_path):
    """Issue 35, item 15: one bfloat16 step apart at 1 (2^-7), within 1e-2 of the largest value
    100: equal within --rtol 1e-2 (as integer bits they were never within anything); 200 for 100
    is not; exact comparison still sees the one step."""
    write_bfloat16_store(tmp_path / "a", [1.0, 2.0, 100.0])
    write_bfloat16_store(tmp_path / "b", [1.0 + 2**-7, 2.0, 100.0])
    write_bfloat16_store(tmp_path / "c", [1.0, 2.0, 200.0])
    close = compare(tmp_path / "a", tmp_path / "b", "--rtol", "1e-2")
    assert close.returncode == 0, close.stdout
    exact = compare(tmp_path / "a", tmp_path / "b")
    assert exact.returncode == 1 and "hidden_states.h5: dataset hidden/0 differs" in exact.stdout
    far = compare(tmp_path / "a", tmp_path / "c", "--rtol", "1e-2")
    assert far.returncode == 1 and "hidden_states.h5: dataset hidden/0 differs" in far.stdout


def test_an_unreadable_file_is_a_difference_naming_it(tmp_path):
    """Issue 35, item 15: a leftover `.h5` that is not HDF5 (and a JSON file that is not JSON)
    is reported as a difference naming the file, and the comparison goes on, no traceback."""
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "fine.tsv").write_text("x\n1\n")
        with h5py.File(tmp_path / side / "maps.h5", "w") as f:
            f["m"] = np.arange(3.0)
    (tmp_path / "a" / "manifest.json").write_text('{"path": "x"}')
    (tmp_path / "b" / "manifest.json").write_text('{"path": ')
    (tmp_path / "b" / "maps.h5").write_bytes(b"killed while writing")
    for options in ((), ("--rtol", "1e-5")):
        result = compare(tmp_path / "a", tmp_path / "b", *options)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        lines = result.stdout.splitlines()
        assert lines[-1] == "3 files in both, 2 differences"
        assert lines[0].startswith(f"manifest.json: {tmp_path / 'b' / 'manifest.json'} cannot be")
        assert lines[1].startswith(f"maps.h5: {tmp_path / 'b' / 'maps.h5'} cannot be read")


def test_manifests_differing_only_in_file_mtimes_compare_clean(tmp_path):
    """Issue m24: two acquisitions of one GGUF record the same files with other modification
    times; those alone are no difference, a changed hash (or anything else) still is."""
    record = {"sha256": "ab" * 32, "size": 10, "mtime_ns": 1}
    manifest = {"name": "m", "files": {"config.json": record}, "gguf": {"mtime_ns": 5}}
    later = {"name": "m", "files": {"config.json": {**record, "mtime_ns": 2}}, "gguf": {}}
    later["gguf"]["mtime_ns"] = 6
    other = {**later, "files": {"config.json": {**record, "sha256": "cd" * 32}}}
    for side, content in (("a", manifest), ("b", later), ("c", other)):
        (tmp_path / side / "m").mkdir(parents=True)
        (tmp_path / side / "m" / "manifest.json").write_text(json.dumps(content))
    same = compare(tmp_path / "a", tmp_path / "b")
    assert same.returncode == 0, same.stdout
    changed = compare(tmp_path / "a", tmp_path / "c")
    assert changed.returncode == 1 and "m/manifest.json: JSON differs" in changed.stdout


def write_check(folder: Path, name: str, rows: list, columns: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows, columns=columns).to_csv(folder / name, sep="\t", index=False)


CHECK = ["layer", "stage", "max_abs", "max_rel"]
IDENTITY = ["layer", "head", "identity", "max_abs_residual", "max_abs_value"]


def test_check_tables_compare_as_residuals(tmp_path):
    """Issue 35, item 25: two runs' residuals are rounding noise, here 3e-6 against 9e-6 (the
    loading routes' `Logit` check): within the residual bound on both sides they agree, though
    not within 1e-5 of each other; a residual above the bound, another stage or another scale
    still differs, and so do the same numbers in a table that is not a check table."""
    rows = [[1, "Attn", 1e-7, 2e-8], [2, "Logit", 3e-6, 4e-7]]
    noise = [[1, "Attn", 1e-7, 2e-8], [2, "Logit", 9e-6, 5e-6]]
    above = [[1, "Attn", 1e-7, 2e-8], [2, "Logit", 9e-4, 2e-4]]
    renamed = [[1, "Attn", 1e-7, 2e-8], [2, "LogitDifference", 3e-6, 4e-7]]
    sides = {  # propagation_check rows, identity_check's residual and scale
        "a": (rows, 3e-13, 10.0),
        "b": (noise, 9e-13, 10.0),
        "c": (above, 3e-13, 10.0),
        "d": (renamed, 3e-13, 12.0),
    }
    for side, (table, residual, scale) in sides.items():
        write_check(tmp_path / side, "propagation_check.tsv", table, CHECK)
        identity = [[1, 1, "XWAXT=QSKT", residual, scale]]
        write_check(tmp_path / side, "identity_check.tsv", identity, IDENTITY)
    for side in sides:  # an analysis that does not apply writes a status row alone
        write_check(tmp_path / side, "decomposition_check.tsv", [["not applicable"]], ["status"])
    agree = compare(tmp_path / "a", tmp_path / "b", "--rtol", "1e-5")
    assert agree.returncode == 0, agree.stdout + agree.stderr
    too_large = compare(tmp_path / "a", tmp_path / "c", "--rtol", "1e-5").stdout.splitlines()
    assert too_large[:-1] == [
        "propagation_check.tsv: column max_abs differs",
        "propagation_check.tsv: column max_rel differs",
    ]
    other = compare(tmp_path / "a", tmp_path / "d", "--rtol", "1e-5").stdout.splitlines()
    assert other[:-1] == [
        "identity_check.tsv: column max_abs_value differs",
        "propagation_check.tsv: column stage differs",
    ]
    for side, table in (("a", rows), ("b", noise)):
        write_check(tmp_path / "plain" / side, "prediction.tsv", table, CHECK)
    plain = compare(tmp_path / "plain" / "a", tmp_path / "plain" / "b", "--rtol", "1e-5")
    assert "prediction.tsv: column max_abs differs" in plain.stdout
    assert compare(tmp_path / "a", tmp_path / "b").returncode == 1  # --rtol 0: bytes


def test_empty_text_cells_compare_equal_within_rtol(tmp_path):
    """A text column with empty cells (the layer kind of a summary row over all layers) agrees
    with itself under --rtol, as it does byte for byte: pandas reads the cells as NaN, which
    equals nothing; another text in a cell still differs."""
    columns = ["layer", "mean", "attention"]
    kinds = {"a": "global", "b": "global", "c": "sliding"}
    for side, kind in kinds.items():
        rows = [[1, 0.5, kind], ["all", 0.5, None]]
        write_check(tmp_path / side, "x_summary.tsv", rows, columns)
    same = compare(tmp_path / "a", tmp_path / "b", "--rtol", "1e-5")
    assert same.returncode == 0, same.stdout
    other = compare(tmp_path / "a", tmp_path / "c", "--rtol", "1e-5").stdout.splitlines()
    assert other[:-1] == ["x_summary.tsv: column attention differs"]


def test_shared_columns_compare_an_older_table_with_a_newer_one(tmp_path):
    """--shared-columns: a newer version's table with an added column compares on the columns
    both have (equal here), and the added column is named once; a shared column that changed
    still differs. Without it, the tables' columns differ."""
    old = [[1, 0.5], [2, 0.25]]
    write_check(tmp_path / "a", "heads.tsv", old, ["layer", "value"])
    new = [[1, 0.5, "global"], [2, 0.25, "sliding"]]
    write_check(tmp_path / "b", "heads.tsv", new, ["layer", "value", "attention"])
    changed = [[1, 0.5, "global"], [2, 0.75, "sliding"]]
    write_check(tmp_path / "c", "heads.tsv", changed, ["layer", "value", "attention"])
    added = f"heads.tsv: columns only in {tmp_path / 'b' / 'heads.tsv'}: attention"
    same = compare(tmp_path / "a", tmp_path / "b", "--shared-columns").stdout.splitlines()
    assert same[:-1] == [added]
    other = compare(tmp_path / "a", tmp_path / "c", "--shared-columns", "--rtol", "1e-5")
    assert "heads.tsv: column value differs" in other.stdout.splitlines()
    plain = compare(tmp_path / "a", tmp_path / "b").stdout.splitlines()
    assert plain[:-1] == ["heads.tsv: bytes differ"]


def check_store(store: Path, model, tmp_path: Path) -> subprocess.CompletedProcess:
    model.save_pretrained(tmp_path / "model")
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"path": str(tmp_path / "model")}))
    command = [sys.executable, str(TOOLS / "check_store.py"), str(store), str(manifest)]
    return subprocess.run(command, capture_output=True, text=True)


def test_check_store_accepts_a_correct_store_of_large_states(tmp_path):
    """Issue 39, section 5: a tiny Llama whose embeddings and block outputs are scaled by 3e5,
    so that hidden/1 reaches |x| ≈ 24,000 (real decoders' first positions reach 25,000): the
    float32 store of another batching differs from the fresh forward by float32 rounding,
    more than an absolute 1e-4 there but far less than 1e-4 of the token's scale, and passes;
    a change of 1e-3 of the token's scale still fails."""
    model = tiny_model("llama")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("embed_tokens.weight", "o_proj.weight", "down_proj.weight")):
                p.mul_(3e5)
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "llama", batch=6)
    store = tmp_path / "states.h5"
    extract(model, encoded, store, ExtractSettings(batch_size=3))
    with HiddenStates(store) as states:
        real = states.attention_mask.astype(bool)
        state = states.hidden(1)
    assert np.abs(state[real]).max() > 1e4
    good = check_store(store, model, tmp_path)
    assert good.returncode == 0 and "OK" in good.stdout, good.stdout + good.stderr
    b, i = np.unravel_index(np.abs(state).max(-1).argmax(), state.shape[:2])
    with h5py.File(store, "a") as f:
        f["hidden/1"][b, i, 0] += 1e-3 * np.abs(state[b, i]).max()
    bad = check_store(store, model, tmp_path)
    assert bad.returncode == 1 and "FAIL: hidden/1" in bad.stdout, bad.stdout


def test_check_store_compares_the_states_a_layer_subset_keeps(tmp_path):
    """Issue 35, item 26: a store made with `layers: [2]` of a 2-layer model keeps hidden/1
    and hidden/2 alone; the tool compares those (it stopped with StateNotStoredError) and
    still finds a change in one."""
    model = tiny_model("bert")
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "bert")
    store = tmp_path / "states.h5"
    extract(model, encoded, store, ExtractSettings(batch_size=3, layers=[2]))
    good = check_store(store, model, tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    compared = [
        line.split(":")[0] for line in good.stdout.splitlines() if line.startswith("hidden/")
    ]
    assert compared == ["hidden/1", "hidden/2"]
    with h5py.File(store, "a") as f:
        f["hidden/2"][0, 1, 0] += 1e-2
    bad = check_store(store, model, tmp_path)
    assert bad.returncode == 1 and "FAIL: hidden/2" in bad.stdout, bad.stdout
