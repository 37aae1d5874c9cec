"""The heads family's settings (config `analyses.heads`): each setting's one home, its
default, bounds and description (`core.settings.setting`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnscope.core.settings import setting, top_level


@dataclass(frozen=True)
class ScoresSettings:
    """One heads_scores job's settings: `batch_size` sequences per batch of the role pass (the
    top-level `batch_size`); `device`: a torch device string."""

    family: ClassVar[str] = "heads"
    batch_size: int = top_level("batch_size")
    pattern_pieces: int = setting(
        "pieces of the small attention patterns on the atlas cards (natural text x itself; the "
        "repeated sequence's second copy x the start of the first)",
        16,
        minimum=2,
    )
    device: str = "cpu"


@dataclass(frozen=True)
class RolesSettings:
    """One heads_roles job's settings: the roles' thresholds (in place of the defaults of
    `roles.ROLES`) and circuits.tsv's smallest share."""

    family: ClassVar[str] = "heads"
    thresholds: dict = setting(
        "{role: threshold} in place of the defaults: a head earns a role when the role's score "
        "exceeds it. Roles (score, default): induction (0.4), duplicate (0.4), previous_token "
        "(0.4), sink (share of sequences in which the first key is a sink, Gu et al., 0.5), "
        "cls, sep, punct (mass, 0.6), prev, next, self (weight, 0.5), broad (entropy in nats, "
        "3.8), syntax (accuracy above the offset baseline, 0.1), coreference (accuracy above "
        "the best baseline, 0.0), rotary_positional (mass, 0.5); weights and masses in [0, 1), "
        "margins in [-1, 1)",
        {},
    )
    min_share: float = setting(
        "circuits.tsv keeps the upstream heads and blocks that carry at least this share of a "
        "role head's lift towards its role's keys (per side), and a rest row",
        0.1,
        exclusive_minimum=0,
        maximum=1,
    )
