"""Layer kinds (`attnscope.core.layer_kinds`): global or sliding attention, the window and the
rotary base of every layer, against what the real modules do, and the kind columns of the
per-layer tables."""

from __future__ import annotations

import inspect

import numpy as np
import pandas as pd
import pytest
import torch

from attnscope.architectures import canonical_weights
from attnscope.architectures.base import base_model
from attnscope.core.layer_kinds import KIND_COLUMNS, layer_kinds, with_layer_kinds
from conftest import WINDOW, tiny_batch, tiny_model

# gemma3_text: local base 1e4, global 1e6 (its defaults), so a mix-up of the two shows
KINDS_TYPES = (
    "gemma3_text",
    "gemma2",
    "mistral",
    "qwen2",
    "qwen3",
    "cohere",
    "smollm3",
    "phi3",
    "llama",
    "gpt_neox",
    "gpt2",
)


def module_angles(model, l: int) -> np.ndarray | None:
    """The angles at position 1 of layer l's rotary embedding as the model's own rotary module
    hands them to the layer (atan2 of its sin and cos), sorted; None where the layer turns
    nothing (SmolLM3's NoPE layers, learned positions)."""
    core = base_model(model)
    attn = getattr(core.layers[l], "self_attn", None) if hasattr(core, "layers") else None
    if not hasattr(core, "rotary_emb") or not getattr(attn, "use_rope", True):
        return None
    emb = core.rotary_emb
    x = torch.zeros(1, 2, model.config.hidden_size)
    args = [x, torch.arange(2)[None]]
    if "layer_type" in inspect.signature(emb.forward).parameters:
        args.append(model.config.layer_types[l])
    with torch.no_grad():
        cos, sin = emb(*args)
    return np.sort(torch.atan2(sin[0, 1], cos[0, 1]).double().numpy())


def expected_angles(theta: float, dims: int) -> np.ndarray:
    """theta^(-2b / dims) for b = 0..dims/2 - 1, each twice (both dimensions of a band), sorted."""
    inv_freq = theta ** (-np.arange(0, dims, 2) / dims)
    return np.sort(np.repeat(inv_freq, 2))


@pytest.mark.parametrize("model_type", KINDS_TYPES)
def test_layer_kinds_follow_the_modules(model_type):
    model = tiny_model(model_type)
    kinds = layer_kinds(canonical_weights(model))
    config = model.config
    n_layers = config.num_hidden_layers
    assert kinds["layer"].tolist() == list(range(1, n_layers + 1))
    types = getattr(config, "layer_types", None)
    if model_type in ("mistral", "phi3"):  # the config's window on every layer
        types = ["sliding_attention"] * n_layers
    elif types is None:
        types = ["full_attention"] * n_layers
    expected = ["sliding" if kind == "sliding_attention" else "global" for kind in types]
    assert kinds["attention"].tolist() == expected
    sliding = kinds["attention"] == "sliding"
    assert (kinds.loc[sliding, "window"] == WINDOW).all()
    assert kinds.loc[~sliding, "window"].isna().all()
    for l in range(n_layers):
        angles, theta = module_angles(model, l), kinds["rope_theta"][l]
        if angles is None:
            assert np.isnan(theta)
        else:
            np.testing.assert_allclose(angles, expected_angles(theta, len(angles)), rtol=1e-3)


def test_gemma3_local_and_global_layers_have_their_own_base():
    kinds = layer_kinds(canonical_weights(tiny_model("gemma3_text", layers=4)))
    by_kind = kinds.groupby("attention")["rope_theta"].unique()
    assert by_kind["sliding"].tolist() == [1e4]
    assert by_kind["global"].tolist() == [1e6]


@pytest.mark.parametrize("model_type", ("gemma2", "gemma3_text", "mistral", "qwen2"))
def test_a_sliding_layer_puts_no_weight_beyond_its_window(model_type):
    """The model's own eager attention weights: a sliding layer's query i gives keys j <= i -
    window exactly 0 (the first position too, past the window), a global layer's query gives
    the first position weight at every distance."""
    model = tiny_model(model_type)
    kinds = layer_kinds(canonical_weights(model))
    ids, mask = tiny_batch(model_type, batch=1, length=3 * WINDOW)
    with torch.no_grad():
        attentions = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    n = ids.shape[1]
    i, j = np.arange(n)[:, None], np.arange(n)[None]
    for row in kinds.itertuples():
        A = attentions[row.layer - 1][0].numpy()  # [H, n, n]
        if row.attention == "sliding":
            assert (A[:, i - j >= row.window] == 0).all()
            assert (A[:, (i - j < row.window) & (i >= j)] > 0).all()
        else:
            assert (A[:, :, 0] > 0).all()


def test_with_layer_kinds_adds_the_columns_and_keeps_the_table():
    kinds = pd.DataFrame(
        {
            "layer": [1, 2],
            "attention": ["sliding", "global"],
            "window": pd.array([512, None], dtype="Int64"),
            "rope_theta": [1e4, 1e6],
        }
    )
    table = pd.DataFrame({"layer": [2, 1, "all"], "head": [1, 1, 0], "value": [0.5, 0.25, 0.1]})
    out = with_layer_kinds(table, kinds)
    assert out.columns.tolist() == ["layer", "head", "value", *KIND_COLUMNS]
    pd.testing.assert_frame_equal(out[table.columns], table)
    assert out["attention"].tolist()[:2] == ["global", "sliding"]
    assert out["window"].tolist()[:2] == [pd.NA, 512]
    assert out["rope_theta"].tolist()[:2] == [1e6, 1e4]
    assert out.iloc[2][list(KIND_COLUMNS)].isna().all()
    plain = pd.DataFrame({"head": [1], "value": [1.0]})
    assert with_layer_kinds(plain, kinds) is plain
    # a column of the table's own under a kind's name stays (gradients.tsv's attention weight)
    own = pd.DataFrame({"layer": [1, 2], "importance": [0.5, 0.25], "attention": [0.3, 0.1]})
    out = with_layer_kinds(own, kinds)
    assert out.columns.tolist() == ["layer", "importance", "attention", "window", "rope_theta"]
    assert out["attention"].tolist() == [0.3, 0.1] and out["window"].tolist() == [512, pd.NA]


def kinds_of(attention: list[str], windows: list, thetas: list[float]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "layer": np.arange(1, len(attention) + 1),
            "attention": attention,
            "window": pd.array(windows, dtype="Int64"),
            "rope_theta": thetas,
        }
    )


def test_rotary_bands_are_ranked_within_each_kind():
    """Layers 1 and 3 slide (base 1e4), layer 2 is global (base 1e6); band 0 is the most
    positional of the sliding layers, band 1 of the global one: a ranking over all layers
    would put band 0 first for both."""
    from attnscope.analyses.position.rotary import band_ranking

    kinds = kinds_of(["sliding", "global", "sliding"], [8, None, 8], [1e4, 1e6, 1e4])
    share = {1: [0.9, 0.1, 0.5], 2: [0.2, 0.8, np.nan], 3: [0.7, 0.3, 0.5]}
    rows = [
        (layer, head, band, 10.0 ** -(band + (layer == 2)), share[layer][band] * head, 0.25)
        for layer in (1, 2, 3)
        for head in (1, 2)
        for band in range(3)
    ]
    columns = ["layer", "head", "band", "theta", "positional_share", "abs_share"]
    bands = with_layer_kinds(pd.DataFrame(rows, columns=columns), kinds)
    bands["wavelength"] = 2 * np.pi / bands["theta"]
    ranking = band_ranking(bands)
    sliding = ranking[ranking["attention"] == "sliding"].set_index("band")
    glob = ranking[ranking["attention"] == "global"].set_index("band")
    assert sliding["rank"].tolist() == [1, 3, 2]
    assert glob["rank"].tolist() == [2, 1, 3]  # the constant (NaN) band last
    np.testing.assert_allclose(sliding["positional_share"], [1.2, 0.3, 0.75])  # heads x 1, x 2
    assert (sliding["n_layers"] == 2).all() and (sliding["n_rows"] == 4).all()
    assert (sliding["rope_theta"] == 1e4).all() and (glob["rope_theta"] == 1e6).all()
    assert (sliding["window"] == 8).all() and glob["window"].isna().all()


def test_kind_summary_keeps_local_and_global_layers_apart():
    """Sink heads: both heads of the global layer 2 are sinks (first-position weight 0.6 and
    0.8), none of the sliding layers 1 and 3 (0.1 to 0.4); a layer without rotation is its own
    kind; the summary row of every layer ("all") counts in none."""
    from attnscope.core.layer_kinds import kind_summary

    kinds = kinds_of(
        ["sliding", "global", "sliding", "global"], [4, None, 4, None], [1e4, 1e6, 1e4, np.nan]
    )
    heads = pd.DataFrame(
        {
            "layer": [1, 1, 2, 2, 3, 3, 4, 4, "all"],
            "alpha_first": [0.1, 0.3, 0.6, 0.8, 0.2, 0.4, 0.5, 0.5, 0.9],
            "sink": [False, False, True, True, False, False, True, False, True],
        }
    )
    summary = kind_summary(with_layer_kinds(heads, kinds), ["alpha_first", "sink"])
    assert summary["attention"].tolist() == ["global", "global", "sliding"]
    assert summary["rope_theta"].tolist()[0] == 1e6 and np.isnan(summary["rope_theta"][1])
    np.testing.assert_allclose(summary["alpha_first"], [0.7, 0.5, 0.25])
    np.testing.assert_allclose(summary["sink"], [1.0, 0.5, 0.0])
    assert summary["n_layers"].tolist() == [1, 1, 2]
    assert summary["n_rows"].tolist() == [2, 2, 4]


def test_figures_mark_the_global_layers_of_a_model_with_both_kinds():
    """Gemma-3's pattern on 6 layers (layer 6 global, window 512): the heatmap's layer labels
    show layer 6 in the global colour and name the window; a line plot gets a dotted line at
    layer 6 alone; a model of one kind is drawn as before."""
    import matplotlib.colors as mcolors

    from attnscope.analyses.norms.plots import attention_sinks, massive_activations
    from attnscope.core.plotting import GLOBAL_COLOUR

    kinds = kinds_of(["sliding"] * 5 + ["global"], [512] * 5 + [None], [1e4] * 5 + [1e6])
    grid = pd.DataFrame(
        [(layer, head, 0.5, 0.5, 1.0) for layer in range(1, 7) for head in (1, 2)],
        columns=["layer", "head", "alpha_first", "norm_share", "fx_ratio"],
    )
    fig = attention_sinks(with_layer_kinds(grid, kinds), "t")
    labels = fig.axes[0].get_yticklabels()
    assert [label.get_text() for label in labels] == ["1", "2", "3", "4", "5", "6"]
    global_rgb = mcolors.to_rgb(GLOBAL_COLOUR)
    coloured = [mcolors.to_rgb(label.get_color()) == global_rgb for label in labels]
    assert coloured == [False] * 5 + [True]
    assert "window 512" in fig.axes[0].get_ylabel()

    states = pd.DataFrame(
        {
            "layer": range(7),
            **{c: np.ones(7) for c in ("first_max", "other_median", "ratio", "ratio_max")},
        }
    )
    fig = massive_activations(with_layer_kinds(states, kinds), "t")
    dotted = [line for line in fig.axes[0].get_lines() if line.get_linestyle() == ":"]
    assert [line.get_xdata()[0] for line in dotted] == [6]
    one_kind = with_layer_kinds(states, kinds.assign(attention="global", window=pd.NA))
    fig = massive_activations(one_kind, "t")
    assert not [line for line in fig.axes[0].get_lines() if line.get_linestyle() == ":"]
    assert "window" not in fig.axes[0].get_xlabel()


def test_a_heatmap_labels_every_global_layer_of_gemma3_270m():
    """Gemma-3 270M: 18 layers, every sixth global. Thinned to every other layer past 16,
    the labels would skip 6, 12 and 18; with the kinds they are 1, 3, 6, 9, 12, 15, 18 (no
    label beside a global one), the global ones in the global colour."""
    import matplotlib.colors as mcolors
    import matplotlib.pyplot as plt

    from attnscope.core.plotting import GLOBAL_COLOUR, heatmap_layer_ticks

    kinds = kinds_of(
        ["global" if layer % 6 == 0 else "sliding" for layer in range(1, 19)],
        [None if layer % 6 == 0 else 512 for layer in range(1, 19)],
        [1e6 if layer % 6 == 0 else 1e4 for layer in range(1, 19)],
    )
    fig, ax = plt.subplots()
    ax.imshow(np.zeros((18, 4)), extent=(0, 4, 18, 0))
    heatmap_layer_ticks(ax, range(1, 19), kinds=kinds)
    labels = ax.get_yticklabels()
    assert [label.get_text() for label in labels] == ["1", "3", "6", "9", "12", "15", "18"]
    global_rgb = mcolors.to_rgb(GLOBAL_COLOUR)
    assert [mcolors.to_rgb(label.get_color()) == global_rgb for label in labels] == [
        False, False, True, False, True, False, True
    ]  # fmt: skip
    heatmap_layer_ticks(ax, range(1, 19))  # without kinds: every other layer, as before
    assert [label.get_text() for label in ax.get_yticklabels()][:3] == ["1", "3", "5"]
    plt.close(fig)


def test_a_shared_axis_heatmap_marks_the_global_layers():
    """weights' relative_position draws three heatmaps sharing their layer axis; labelling
    the global layers there failed on the shared axes' tick labels (a decoder workflow run)."""
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from attnscope.analyses.weights import plots

    heads = pd.DataFrame(
        [
            {"layer": layer, "head": head, "prev": 0.1, "next": 0.2, "self": 0.3}
            | {"attention": "global" if layer % 2 == 0 else "sliding"}
            | {"window": None if layer % 2 == 0 else 4, "rope_theta": 1e4}
            for layer in range(1, 5)
            for head in range(1, 5)
        ]
    )
    figure = plots.relative_position(heads=heads, title="t")
    labels = {t.get_text(): t.get_color() for t in figure.axes[0].get_yticklabels()}
    assert [text for text, colour in labels.items() if colour != ".15"] == ["2", "4"]


def test_the_sink_card_marks_gemma3s_global_layers():
    """Gemma-3 270M (every sixth of 18 layers global): the sink card's two per-layer panels,
    Gu's Sink^eps bars and Kobayashi's shares, draw a dotted line at layers 6, 12 and 18;
    a model of one kind gets none."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnscope.analyses.norms.plots import sink_card

    kinds = kinds_of(
        ["global" if layer % 6 == 0 else "sliding" for layer in range(1, 19)],
        [None if layer % 6 == 0 else 512 for layer in range(1, 19)],
        [1e6 if layer % 6 == 0 else 1e4 for layer in range(1, 19)],
    )
    layers = [*range(1, 19), "all"]
    epsilon = pd.DataFrame(
        {"layer": layers, "sink_share": 0.5, "sink_share_control": 0.0}
        | {"sink_share_anchored": 0.4, "epsilon": 0.3, "positions": 64}
    )
    stream = pd.DataFrame(
        {"layer": [1, 1, 18, 18], "position_from": [0, 1, 0, 1], "position_to": [1, 2, 1, 2]}
        | {"alpha_first": [0.9, 0.5, 0.8, 0.4]}
    )
    kobayashi = pd.DataFrame({"layer": layers, "alpha_first": 0.5, "norm_share": 0.3})

    def dotted(kinds_table):
        fig = sink_card(
            with_layer_kinds(epsilon, kinds_table),
            stream,
            with_layer_kinds(kobayashi, kinds_table),
            "t",
        )
        bars, _, shares = fig.axes[:3]
        found = [
            [line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == ":"]
            for ax in (bars, shares)
        ]
        plt.close(fig)
        return found

    assert dotted(kinds) == [[6, 12, 18], [6, 12, 18]]
    assert dotted(kinds.assign(attention="global", window=pd.NA)) == [[], []]
