"""Each input token's share of a prediction: the propagated split pushed through the LM head.

The last state's split (`propagation.propagate`) goes through the final norm (pre-LN), the
head's transform (a masked-LM head's dense layer and activation, split by Integrated
Gradients like an FF block, and its LayerNorm) and the unembedding column of the token:

    logit_t = sum_j a_{j, t} + a_{bias, t},   a_{j, t} = multiplier * (p_j W_U[:, t]) * k

with the soft-cap's factor k = softcap(z) / z (z the capped logit's input), which is what IG
with a zero baseline gives for the scalar c tanh(z / c). Checked against the model's own
logits: a forward pass of the loaded model (`model_logits`), or where no model is in memory
(the layer-streamed route: `LoadedModel.reference_logits` picks) its head on the last state
X_L (`stored_logits`), either at the attributed positions only (never a batch's [B, n, V]:
Gemma-3's 262,144 pieces). Where the logits are read: masked positions for a
masked LM; for a causal LM each sequence's last text piece (what follows the user's text), not
the closing separator the layout adds (`data/corpora/layout.py`), whose next token would be the
start of another document. Text pieces are those with a word (`word_ids` >= 0); the start,
separators and padding have none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from attnscope.architectures import architecture, unembedding_input
from attnscope.core.canonical import CanonicalLayerNorm, CanonicalModel, PredictionHead, cast
from attnscope.core.checks import ResidualLog
from attnscope.core.lm_head import head_logits
from attnscope.core.store import HiddenStates
from attnscope.core.tokens import contrast_ids
from attnscope.maps.layer_decomposition import TokenFactors, layer_norm_parts, per_token
from attnscope.maps.propagation import Chunk

BIAS_SOURCE = -1  # the `source` of the bias rows in prediction.tsv
LOGIT = "Logit"  # the check stages of the attribution
CONTRAST = "LogitDifference"


def prediction_positions(
    input_ids: np.ndarray, mask: np.ndarray, word_ids: np.ndarray, mask_token_id: int | None
) -> list[tuple[int, int]]:
    """(row, position) pairs whose prediction is attributed: every [MASK] when
    `mask_token_id` is given (masked LM), else each row's last text piece (causal LM): the
    last real position that belongs to a word, before the separator(s) the layout closes
    with. input_ids, mask, word_ids [B, n]; a row without any text piece has none."""
    real = mask > 0
    if mask_token_id is not None:
        rows, positions = np.nonzero((input_ids == mask_token_id) & real)
        return list(zip(rows.tolist(), positions.tolist(), strict=True))
    text = real & (word_ids >= 0)
    return [(row, int(np.flatnonzero(t)[-1])) for row, t in enumerate(text) if t.any()]


def _normed(parts, bias, ln: CanonicalLayerNorm | None, recorded: TokenFactors | None, key: str):
    """[P, m, d], [P, d] through a norm (scale from their sum, or recorded under `key`), or
    unchanged."""
    if ln is None:
        return parts, bias
    s = per_token(recorded, key, parts[:, None], bias[:, None], ln.scale)
    parts, bias = layer_norm_parts(parts[:, None], bias[:, None], ln, s)
    return parts[:, 0], bias[:, 0]


def logit_attribution(
    parts: torch.Tensor,
    bias: torch.Tensor,
    final_ln: CanonicalLayerNorm | None,
    head: PredictionHead,
    columns: torch.Tensor,
    ig_steps: int = 0,
    recorded: TokenFactors | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Split the logits of `columns` [P, k] (token ids) at P positions by source.

    parts [P, m, d], bias [P, d]: the last residual state's split at those positions.
    Returns (contributions [P, k, m], bias share [P, k]); their sum over m plus the bias
    share is the logit. `recorded`: the per-position factors (norm scales, the transform's
    IG coefficients, the soft-cap's factor), as `carried_stages`' `recorded`: filled from a
    split that sums to the state, used for one of only some sources (`LogitSplit`).
    """
    dtype = parts.dtype  # the head's weights are taken to it (the k columns of W_U alone)
    parts, bias = _normed(parts, bias, cast(final_ln, dtype), recorded, "final_ln")
    if head.transform is not None:
        transform = cast(head.transform, dtype)

        def linearise(total):
            return transform.linearise(total, ig_steps)

        lin = per_token(recorded, "transform", parts[:, None], bias[:, None], linearise)
        c = lin.c[:, 0]  # [P, m_ff]
        parts = lin.fold((parts @ lin.W_pre) * c[:, None]) @ lin.W_post
        bias = lin.fold((bias @ lin.W_pre + lin.b_pre) * c) @ lin.W_post + lin.b_out
    parts, bias = _normed(parts, bias, cast(head.ln, dtype), recorded, "head_ln")
    unembed = head.W_U.T[columns].to(dtype)  # [P, k, d]
    contributions = torch.einsum("pmd,pkd->pkm", parts, unembed) * head.multiplier
    b_U = head.b_U[columns].to(dtype)
    bias_share = (torch.einsum("pd,pkd->pk", bias, unembed) + b_U) * head.multiplier
    if head.softcap is not None:

        def softcap_factor(z):  # z [P, k]: the capped logits' inputs
            return torch.where(z != 0, head.softcap * torch.tanh(z / head.softcap) / z, 1.0)

        factor = per_token(recorded, "softcap", contributions, bias_share, softcap_factor)
        contributions, bias_share = contributions * factor[..., None], bias_share * factor
    return contributions, bias_share


def prediction_rows(
    found: Attribution, sequences: list[int], input_ids: list[np.ndarray], token_of
) -> pd.DataFrame:
    """Rows of prediction.tsv for the P positions of `found`: one per visible source token
    and one for the bias (`source` -1). `sequences` [P]: the sequence of each position in the
    corpus; `input_ids` [P]: its visible pieces. `position` and `token` name the piece the
    prediction is made at; `predicts` (`found.kind`) says what it predicts there: "masked"
    (the piece behind that [MASK]) or "next" (the piece after that one, a causal LM's next
    word); `predicted` the first column (then target and foil when a contrast is set)."""
    frames = []
    located = zip(sequences, found.positions, input_ids, strict=True)
    columns, contributions, logits = found.columns, found.contributions, found.logits
    bias = found.bias
    for p, (sequence, position, ids) in enumerate(located):
        sources = np.arange(len(ids))
        frame = pd.DataFrame(
            {
                "sequence": sequence,
                "position": position,
                "token": token_of(int(ids[position])),
                "predicts": found.kind,
                "predicted": token_of(int(columns[p, 0])),
                "logit": logits[p, 0],
                "source": np.append(sources, BIAS_SOURCE),
                "source_token": [*map(token_of, ids.tolist()), "<bias>"],
                "contribution": np.append(contributions[p, 0, : len(ids)], bias[p, 0]),
            }
        )
        if columns.shape[1] == 3:  # target - foil
            difference = contributions[p, 1, : len(ids)] - contributions[p, 2, : len(ids)]
            frame["contrast_logit"] = logits[p, 1] - logits[p, 2]
            frame["contrast_contribution"] = np.append(difference, bias[p, 1] - bias[p, 2])
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


# The logits [P, V] at P positions of one batch that the attribution is checked against,
# from (store, batch, the carried total X_L [B, n, d], rows [P], positions [P]):
# `partial(model_logits, model)` or `partial(stored_logits, head, weights)`.
ReferenceLogits = Callable[
    [HiddenStates, object, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor
]


@dataclass
class Prediction:
    """What the prediction attribution needs: the model's head (None: no LM head), the mask
    token of a masked LM (None for a causal LM), and an optional (target, foil) pair of
    token ids; `token_of` turns ids into token strings; `logits` gives the reference logits
    the attribution is checked against (`ReferenceLogits`: `model_logits` of a model in
    memory, or `stored_logits`; `LoadedModel.reference_logits` says which)."""

    head: PredictionHead | None
    mask_token_id: int | None
    contrast: tuple[int, int] | None
    token_of: Callable[[int], str]
    logits: ReferenceLogits

    @classmethod
    def of(
        cls,
        head: PredictionHead | None,
        manifest: dict,
        tokenizer,
        contrast: list[str],
        logits: ReferenceLogits,
        setting: str = "analyses.mixing.contrast",
    ) -> Prediction:
        """What a model predicts with its `head` (`LoadedModel.head`), with the `contrast`
        setting [target, foil] (empty: none; `setting` names it in errors, see
        `core.tokens.contrast_ids`); `logits` as the field."""
        return cls(
            head=head,
            mask_token_id=tokenizer.mask_token_id if manifest["lm_head"] == "masked" else None,
            contrast=contrast_ids(tokenizer, contrast, setting),
            token_of=tokenizer.convert_ids_to_tokens,
            logits=logits,
        )


def model_logits(model, store: HiddenStates, batch, total, rows, positions) -> torch.Tensor:
    """The model's own logits at the positions (rows [P], positions [P] of the batch) by a
    forward pass with its head (a model in memory; `total` unused), the unembedding fed
    those positions alone (`unembedding_input`): [P, V], never the batch's [B, n, V]."""
    arch = architecture(model.config.model_type)
    n, device = batch.X.shape[1], batch.X.device
    types = store.token_type_ids[batch.start : batch.stop, :n].astype(np.int64)
    inputs = arch.model_inputs(
        model,
        torch.from_numpy(batch.input_ids.astype(np.int64)).to(device),
        batch.mask,
        torch.from_numpy(types).to(device),
    )
    with torch.no_grad(), unembedding_input(model, lambda x: x[rows, positions][:, None]):
        return model(**inputs).logits[:, 0].float()


def stored_logits(
    head: PredictionHead, weights: CanonicalModel, store: HiddenStates, batch, total, rows,
    positions,
) -> torch.Tensor:  # fmt: skip
    """The head's logits at the positions (rows [P], positions [P] of the batch) on the stored
    last state X_L, or on the carried total X_L [B, n, d] (`total`) where the store is
    16-bit, so that the check is the head's alone (a model not in memory: the layer-streamed
    route).  [P, V]"""
    n = batch.X.shape[1]
    if store.exact:
        X = store.batch(weights.n_layers, batch.start, batch.stop, n, str(batch.X.device)).X
    else:
        X = total
    with torch.no_grad():
        return head_logits(head, weights.final_ln, X[rows, positions]).float()


@dataclass
class Attribution:
    """The logits of P positions split by input token: `rows` and `positions` in the batch,
    `kind` what is predicted there, `columns` [P, k] the token ids (predicted, then target
    and foil when a contrast is set), `contributions` [P, k, n] per input token, `bias`
    [P, k] the bias part, `logits` [P, k] the model's own (parts + bias = logits, checked)."""

    rows: list[int]
    positions: list[int]
    kind: str  # "masked" (at each [MASK]) or "next" (after each sequence's last text piece)
    columns: np.ndarray
    contributions: np.ndarray
    bias: np.ndarray
    logits: np.ndarray


class LogitSplit:
    """The model's top token at each predicted position of a batch (and target and foil)
    split by input token, assembled from the last state's chunks (`add` each
    `propagation.Chunk` of the last layer): the per-position factors are recorded from the
    whole state the first chunk brings (`logit_attribution`'s `recorded`), each chunk gives
    its sources' contributions, the first one the bias. `result` checks the sum against the
    model's logits: relative to |logit|, at least the spread of the position's logits."""

    def __init__(
        self,
        weights: CanonicalModel,
        store: HiddenStates,
        batch,
        prediction: Prediction,
        ig_steps: int,
    ):
        self.weights, self.store, self.batch = weights, store, batch
        self.prediction, self.ig_steps = prediction, ig_steps
        mask = batch.mask.cpu().numpy()
        self.where = prediction_positions(
            batch.input_ids, mask, batch.word_ids, prediction.mask_token_id
        )
        self.recorded: TokenFactors | None = None

    def _start(self, total: torch.Tensor) -> None:
        """The reference logits, the columns and the recorded factors, from X_L [B, n, d]."""
        device = total.device
        self.rows = torch.tensor([r for r, _ in self.where], device=device)
        self.positions = torch.tensor([p for _, p in self.where], device=device)
        logits = self.prediction.logits(self.store, self.batch, total, self.rows, self.positions)
        columns = logits.argmax(-1, keepdim=True)
        if self.prediction.contrast is not None:
            pair = torch.tensor(self.prediction.contrast, device=logits.device)
            columns = torch.cat([columns, pair.expand(len(self.where), 2)], dim=1)
        self.columns, self.real, self.spread = columns, logits.gather(1, columns), logits.std(-1)
        self.recorded = TokenFactors()
        whole = total[self.rows, self.positions]
        self._attribution(whole[:, None], torch.zeros_like(whole))
        self.contributions = whole.new_zeros(*columns.shape, total.shape[1])
        self.bias: torch.Tensor | None = None

    def _attribution(self, parts, bias):
        weights = self.weights
        return logit_attribution(
            parts,
            bias,
            weights.final_ln,
            self.prediction.head,
            self.columns,
            self.ig_steps,
            self.recorded,
        )

    def add(self, chunk: Chunk) -> None:
        """One chunk of the last state's split (`chunk.total` the whole X_L); the chunks of
        the other layers are passed over."""
        if not self.where or chunk.layer != self.weights.n_layers:
            return
        if self.recorded is None:
            self._start(chunk.total)
        at = (self.rows, self.positions)
        found, bias = self._attribution(chunk.split.parts[at], chunk.split.bias[at])
        self.contributions[..., chunk.sources] = found
        if chunk.carries_bias:
            self.bias = bias

    def result(self, residuals: ResidualLog) -> Attribution | None:
        """The attribution, checked (`residuals` records the `Logit` and `LogitDifference`
        stages at the last layer); None when the batch has no position to attribute."""
        if not self.where:
            return None
        got = self.contributions.sum(-1) + self.bias
        checked = [(LOGIT, got[:, 0], self.real[:, 0])]
        if self.prediction.contrast is not None:
            checked.append((CONTRAST, got[:, 1] - got[:, 2], self.real[:, 1] - self.real[:, 2]))
        for stage, value, want in checked:
            error = (value - want).abs()
            scale = torch.maximum(want.abs(), self.spread)
            max_rel = float((error / scale).max())
            residuals.record(self.weights.n_layers, stage, float(error.max()), max_rel)
        return Attribution(
            rows=[r for r, _ in self.where],
            positions=[p for _, p in self.where],
            kind="masked" if self.prediction.mask_token_id is not None else "next",
            columns=self.columns.cpu().numpy(),
            contributions=self.contributions.cpu().numpy(),
            bias=self.bias.cpu().numpy(),
            logits=self.real.cpu().numpy(),
        )


def prediction_frame(batch, found: Attribution, token_of) -> pd.DataFrame:
    """prediction.tsv rows of one batch's `LogitSplit.result`."""
    lengths = batch.mask.sum(1).cpu().numpy()
    return prediction_rows(
        found,
        [batch.start + r for r in found.rows],
        [batch.input_ids[r, : lengths[r]] for r in found.rows],
        token_of,
    )
