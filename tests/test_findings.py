"""tools/findings.py: the README's findings lines come from the run's tables (constructed here
with known values)."""

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).parents[1]


def load_tool():
    spec = importlib.util.spec_from_file_location("findings", ROOT / "tools" / "findings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(results: Path, corpus: str, family: str, name: str, rows: dict) -> None:
    folder = results / "m" / corpus / family
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(folder / f"{name}.tsv", sep="\t", index=False)


def test_the_lines_state_what_the_tables_hold(tmp_path):
    findings = load_tool()
    write(tmp_path, "wiki", "norms", "sink_epsilon", {
        "layer": ["1", "2", "all"], "sink_share": [0.0, 1.0, 0.5],
        "sink_share_pooled": [0.0, 0.75, 0.375], "sink_share_control": [0.0, 0.25, 0.125],
        "sink_share_anchored": [0.5, 1.0, 0.75], "n_heads": [4, 4, 8], "n_sequences": 32,
        "epsilon": 0.3, "positions": 64,
    })  # fmt: skip
    write(tmp_path, "wiki", "norms", "sink_kobayashi", {
        "layer": ["1", "2", "all"], "alpha_first": [0.1, 0.9, 0.5],
        "norm_share": [0.05, 0.2, 0.125], "norm_over_alpha": [0.5, 0.22, 0.25],
    })  # fmt: skip
    write(tmp_path, "wiki", "norms", "massive_dimensions", {
        "state": [3, 4, 4, 1, 2], "dim": [7, 7, 2, 5, 5], "sequence": [0, 0, 1, 0, 1],
        "position": [0, 0, 0, 6, 9], "piece": ["<s>"] * 3 + ["the"] * 2,
        "position_kind": ["first"] * 3 + ["ordinary"] * 2,
        "value": [-250.0, 1200.0, 130.0, 400.0, -410.0],
        "kind": ["massive"] * 3 + ["ordinary"] * 2,
    })  # fmt: skip
    write(tmp_path, "wiki", "norms", "massive_activations", {
        "layer": [0, 1, 2, 3], "n_sequences": 32, "first_max": [23.4, 2983.8, 9000.0, 7000.0],
    })  # fmt: skip
    write(tmp_path, "wiki", "norms", "massive_intervention", {
        "variant": ["unmodified", "zeroed", "mean"], "state": 3, "dims": "7", "n_entries": 1,
        "n_sequences": 32, "n_predictions": 10, "loss": [3.0, 16.0, 3.01],
        "perplexity": np.exp([3.0, 16.0, 3.01]), "loss_difference": [0, 13.0, 0.01],
    })  # fmt: skip
    write(tmp_path, "wiki512", "position", "rotary_bands", {
        "layer": [1, 1, 2, 2], "head": 1, "band": [0, 1, 0, 1],
        "positional_share": [0.2, 0.6, 0.4, 0.8],
    })  # fmt: skip
    lines = findings.findings(tmp_path, "m")
    assert lines[0].startswith(
        "Sink^ε as Gu et al.'s code computes it (ε = 0.3; each sequence's first 64 pieces; "
        "the per-sequence indicator averaged over 32 sequences and 8 heads): 50.0% "
        "(averaging over sequences before the threshold: 37.5%)"
    )
    assert "one piece everywhere and no BOS: 12.5%" in lines[0]
    assert lines[0].endswith("with the BOS kept (another experiment): 75.0%")
    assert lines[1].endswith("L1 0.10, L2 0.90") and lines[2].endswith("L1 0.05, L2 0.20")
    assert "delimiters): 2 (state 4, up to 130), 7 (states 3–4, up to 1,200); kept" in lines[3]
    assert lines[3].endswith("recur on ordinary tokens: 5 (states 1–2, up to 410)")
    assert lines[4] == (
        "largest |x| at the first position, mean over 32 sequences: 23.4 at the embeddings, "
        "2,984 after layer 1, 9,000 at its peak (state 2), 7,000 at the last state (3)"
    )
    assert lines[5].startswith("with dims 7 set at state 3 (first position and delimiters)")
    assert "over 32 sequences: unmodified 3.000 (perplexity 20.1), zeroed 16.000" in lines[5]
    assert "zeroed 16.000 (perplexity 8.9e+06)" in lines[5]
    assert lines[5].endswith("set to their mean per position kind 3.010 (perplexity 20.3)")
    assert lines[6].endswith("band 1 (0.70), band 0 (0.30)")
    assert len(lines) == 7  # no mixing table: no mixing line


def test_local_and_global_layers_are_reported_apart(tmp_path):
    """Gemma-3's kinds: band 0 is the most positional of the sliding layers (base 1e4), band 1
    of the global ones (base 1e6); pooled, band 0 would lead for both. The sink card's kinds
    give one line with each kind's importance of the first key and Sink^eps."""
    findings = load_tool()
    write(tmp_path, "wiki512", "position", "rotary_bands", {
        "layer": [1, 1, 2, 2, 3, 3], "head": 1, "band": [0, 1, 0, 1, 0, 1],
        "positional_share": [0.9, 0.1, 0.2, 0.3, 0.7, 0.2],
        "attention": ["sliding", "sliding", "global", "global", "sliding", "sliding"],
        "window": [512, 512, None, None, 512, 512], "rope_theta": [1e4, 1e4, 1e6, 1e6, 1e4, 1e4],
    })  # fmt: skip
    write(tmp_path, "wiki", "norms", "sink_kinds", {
        "attention": ["global", "sliding"], "window": [None, 512], "rope_theta": [1e6, 1e4],
        "n_layers": [1, 2], "n_rows": [4, 8], "importance": [0.61, 0.39],
        "sink_rate": [0.75, 0.25], "sink_pooled": [1.0, 0.0],
    })  # fmt: skip
    write(
        tmp_path,
        "wiki1024",
        "norms",
        "sink_stream_kinds",
        {
            "attention": ["global", "global", "sliding"],
            "window": [None, None, 512],
            "rope_theta": [1e6, 1e6, 1e4],
            "bin": [9, 10, 9],
            "position_from": [256, 512, 256],
            "position_to": [511, 1023, 511],
            "n_layers": [1, 1, 2],
            "n_rows": 4,
            "alpha_first": [0.5, 0.45, 0.3],
        },
    )  # fmt: skip  (no sliding row past the window: its queries there cannot see position 0)
    lines = findings.findings(tmp_path, "m")
    assert lines.pop(1) == (
        "weight on the first position of queries 512–1023 (wiki1024): global layers (base "
        "1e+06) 0.45; sliding layers (window 512, base 10000) none (past its window)"
    )
    assert lines[0] == (
        "importance of the first key (Gu et al.) by layer kind: global layers (base 1e+06) 0.61 "
        "(Sink^ε 75.0%); sliding layers (window 512, base 10000) 0.39 (Sink^ε 25.0%)"
    )
    assert lines[1].startswith("most positional rotary bands of the global layers (base 1e+06)")
    assert lines[1].endswith("band 1 (0.30), band 0 (0.20)")
    assert "of the sliding layers (window 512, base 10000)" in lines[2]
    assert lines[2].endswith("band 0 (0.80), band 1 (0.15)")
    assert len(lines) == 3


def test_the_attend_lines_name_the_head_and_its_largest_components(tmp_path):
    """Two heads lift the first position (2.0 and 5.0): the line names the second, its query
    component of largest |lift| (a negative one) and its key component of largest lift."""
    rows = [
        (1, 1, "first", "total", "all", "all", 10, 2.0, 1.0),
        (2, 3, "first", "total", "all", "all", 10, 5.0, 1.0),
        (2, 3, "first", "query", "L1.FF", "all", 10, 3.0, 0.6),
        (2, 3, "first", "query", "embed", "all", 10, -4.0, -0.8),
        (2, 3, "first", "key", "all", "L1.H2", 10, 4.5, 0.9),
        (2, 3, "first", "key", "all", "bias", 10, 0.5, 0.1),
        (1, 1, "previous", "total", "all", "all", 10, 1.0, 1.0),
        (1, 1, "previous", "query", "embed.position", "all", 10, 1.0, 1.0),
        (1, 1, "previous", "key", "all", "embed.position", 10, 0.8, 0.8),
    ]
    columns = ["layer", "head", "keys", "side", "query", "key", "n_rows", "lift", "share"]
    table = {name: [row[i] for row in rows] for i, name in enumerate(columns)}
    write(tmp_path, "wiki", "attend", "key_classes", table)
    lines = load_tool().findings(tmp_path, "m")
    assert lines[0].startswith("the head that lifts the first position most above the rest")
    assert "L2 H3 (by 5.0 in the logit" in lines[0]
    assert "owes it most to embed on the query side (-80% of the lift)" in lines[0]
    assert lines[0].endswith("and L1.H2 on the key side (90%)")
    assert "the previous token most" in lines[1] and "L1 H1 (by 1.0" in lines[1]
    assert len(lines) == 2


def test_a_run_without_the_tables_finds_nothing_to_say(tmp_path):
    assert load_tool().findings(tmp_path, "m") == []
    status = {"status": ["not applicable: no rotary position embedding"]}
    write(tmp_path, "wiki512", "position", "rotary_bands", status)  # an encoder's table
    assert load_tool().findings(tmp_path, "m") == []
