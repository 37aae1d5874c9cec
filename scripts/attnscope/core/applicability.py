"""Which analyses apply to a model, decided in one place from its outline: learned position
rows (`CanonicalModel.learned_positions`), rotary layers (`CanonicalModel.any_rotary`) and the
kind of its language-model head ("masked", "causal", None). Where an analysis does not apply,
`reason` gives the reason that its "not applicable" tables carry (`core.tables.not_applicable`;
the weights' gradient table has a status column of its own, `GRADIENTS`).

Reasons that depend on the data or on the configuration (no positional head found, no
sequence long enough, a layer subset without the last layer) stay with the analysis that
finds them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnscope.core.canonical import CanonicalModel

# {analysis (its script or table): the reason it does not apply}, written into the tables
ROTARY_SCORES = "rotary model (scores are not x W^A x^T)"
REASONS = {
    "position.corpus": ROTARY_SCORES,  # all but tr_t(A)
    "position.embeddings": "rotary model (no position embeddings)",
    "position.angles": "rotary model (no position embeddings; scores are not x W^A x^T)",
    "position.rotary": "learned position embeddings (no rotary bands)",
    "attend.bands": "no rotary embedding",
    "attend.trt_terms": "no learned position embeddings",
    "heads.in_context_loss": "no causal language-model head (next-piece loss)",
    "norms.intervention": "no causal LM head",
    "weights.gradients": "no LM head",
    "mixing.prediction": "no LM head",
}
GRADIENTS = f"not applicable: {REASONS['weights.gradients']}"  # the gradient table's status


def applies(analysis: str, weights: CanonicalModel | None, lm_head: str | None = None) -> bool:
    """Whether `analysis` (a key of `REASONS`) applies to the model of `weights` (its outline
    is read, no layer; None for an analysis that needs only the head), whose language-model
    head is `lm_head` (where the analysis needs one)."""
    learned = lambda: weights.learned_positions  # noqa: E731
    needs = {
        "position.corpus": learned,
        "position.embeddings": learned,
        "position.angles": learned,
        "position.rotary": lambda: not weights.learned_positions,
        "attend.bands": lambda: weights.any_rotary,
        "attend.trt_terms": learned,
        "heads.in_context_loss": lambda: lm_head == "causal",
        "norms.intervention": lambda: lm_head == "causal",
        "weights.gradients": lambda: lm_head is not None,
        "mixing.prediction": lambda: lm_head is not None,
    }
    return needs[analysis]()


def reason(analysis: str, weights: CanonicalModel | None, lm_head: str | None = None) -> str | None:
    """Why `analysis` does not apply to the model (`REASONS`), None where it applies."""
    return None if applies(analysis, weights, lm_head) else REASONS[analysis]
