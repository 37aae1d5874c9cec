"""The mixing family's settings (config `analyses.mixing`): each setting's one home, its
default, bounds and description (`core.settings.setting`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnscope.core.settings import MEMORY_BUDGET_MB, setting


def _batch_size():
    return setting(
        "sequences per batch; a batch's decompositions work in chunks that fit "
        "memory_budget_mb, beyond which memory grows as batch_size x n^2 (the maps)",
        4,
        minimum=1,
    )


@dataclass(frozen=True)
class MixingSettings:
    """One mixing_compute (or mixing_shard) or mixing_propagate job's settings:
    `memory_budget_mb`: the working memory of one chunk of a decomposition; `device`: a torch
    device string (both read from the configuration by `Job.settings`); the last three are
    the propagation's (`propagation`)."""

    family: ClassVar[str] = "mixing"
    # the propagation's settings, which mixing_compute does not read: changing one reruns
    # mixing_propagate alone
    propagation: ClassVar[tuple[str, ...]] = ("propagated_top_k", "rollout_scopes", "contrast")
    batch_size: int = _batch_size()
    ig_steps: int = setting(
        "Integrated Gradients steps for the FF activation (midpoint rule, zero baseline); 0 = "
        "the exact closed form g(U)/U",
        0,
        minimum=0,
    )
    max_rel_residual: float = setting(
        "largest relative residual of any stage (and of the FF completeness) against the real "
        "output before the run fails",
        1.0e-4,
        exclusive_minimum=0,
    )
    depth_rel_residual: float = setting(
        "the same bound for the split carried through the whole depth (mixing_propagate and the"
        " views' propagated map, carried in float64) against the stored float32 states and "
        "logits; the float32 forward's rounding drifts with depth (SmolLM2-135M, layer 30 of "
        "30. 1.1e-4, where each layer alone misses by 1e-6)",
        1.0e-3,
        exclusive_minimum=0,
    )
    maps_dtype: str = setting("storage type of maps.h5", "float32", choices=("float32", "float16"))
    memory_budget_mb: float = MEMORY_BUDGET_MB
    propagated_top_k: int = setting(
        "0 stores propagated.h5's maps whole; k > 0 only each query row's k largest entries "
        "({layer}/key and /value, [N, L, k]), for long sequences. maps.h5 stays whole (the "
        "rollouts, mixing_tables and probing read it back)",
        0,
        minimum=0,
    )
    rollout_scopes: tuple[str, ...] = setting(
        "per-layer maps rolled out through the depth (AttnRes-w = attention rollout, AttnResLn "
        "= GlobEnc) and compared with the propagated decomposition in rollout.tsv",
        ("AttnRes-w", "AttnResLn", "AttnResLnFfRes", "AttnResLnFfResLn"),
    )
    contrast: tuple[str, ...] = setting(
        "[target, foil]: one vocabulary piece each (e.g. ' Paris', ' London' for a byte-level "
        "BPE); prediction.tsv then also splits the logit difference target - foil",
        (),
    )
    device: str = "cpu"


@dataclass(frozen=True)
class MixingTablesSettings:
    """One mixing_tables job's settings: the presentation tables read back from maps.h5."""

    family: ClassVar[str] = "mixing"
    batch_size: int = _batch_size()
    example_sequence: int = setting(
        "sequence (0-based) whose maps go to example_maps.tsv and the scope-maps figure",
        0,
        minimum=0,
    )
    example_tokens: int = setting(
        "the example shows the first this many pieces of that sequence", 24, minimum=2
    )
    ff_pairs_top_k: int = setting(
        "amplified and suppressed piece pairs listed per layer in ff_pairs.tsv", 10, minimum=1
    )


@dataclass(frozen=True)
class MixingFigureSettings:
    """The settings of the mixing family's figures (passed by rules/figures.smk)."""

    family: ClassVar[str] = "mixing"
    prediction_examples: int = setting(
        "predictions drawn in the prediction figure (the first ones of prediction.tsv)",
        4,
        minimum=1,
    )
