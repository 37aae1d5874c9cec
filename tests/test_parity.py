"""tools/parity.py's table holds its bounds: for every supported architecture, on both loading
routes, the stored states, the recomputed attention weights and the LM head's logits equal the
`transformers` forward, and every decomposition rebuilds its module, to float32 rounding."""

import importlib.util
from pathlib import Path

import pytest

from conftest import CLASSIC, DECODERS

ROOT = Path(__file__).parents[1]
spec = importlib.util.spec_from_file_location("parity", ROOT / "tools" / "parity.py")
parity = importlib.util.module_from_spec(spec)
spec.loader.exec_module(parity)

BOUNDS = {"states": 1e-5, "attention": 1e-6, "logits": 1e-5, "norms": 1e-5, "mixing": 1e-5}


@pytest.mark.parametrize("model_type", [*CLASSIC, *DECODERS])
def test_every_architecture_matches_transformers_on_both_routes(model_type, tmp_path):
    folder = parity.tiny_folder(model_type, tmp_path / model_type)
    rows = parity.model_rows(model_type, folder, tmp_path)
    assert [row["route"] for row in rows] == list(parity.ROUTES)
    for row in rows:
        for column, bound in BOUNDS.items():
            assert 0 <= row[column] < bound, (row["route"], column, row[column])
