"""Outputs of the whole-layer mixing analysis (Kobayashi et al. 2021, 2024)."""

from attnscope.maps.scopes import SCOPES
from attnscope.maps.storage import map_bytes as stored_map_bytes
from attnscope.pipeline.outputs import Family, Figure, ModelShape


def map_bytes(settings: dict, n_layers: int, n_sequences: int, length: int) -> dict[str, int]:
    """maps.h5: one [N, L, L] map per scope and layer; propagated.h5: one per layer (each
    row's top k with `propagated_top_k`), and the float32 bias norms [N, layers, L]."""
    dtype = settings["maps_dtype"]
    one_map = stored_map_bytes(n_sequences, length, dtype)
    propagated = stored_map_bytes(n_sequences, length, dtype, settings.get("propagated_top_k", 0))
    return {
        "maps.h5": len(SCOPES) * n_layers * one_map,
        "propagated.h5": n_layers * propagated + n_sequences * n_layers * length * 4,
    }


def part_bytes(
    settings: dict, shape: ModelShape, n_sequences: int, length: int, layers: int
) -> int:
    """A shard's `MixingResult`: the ratios' moments (5 float64 per scope and layer) and the
    RSA sums and counts (2 float64 per pair of scopes and layer)."""
    scopes = len(SCOPES)
    return 8 * shape.n_layers * (5 * scopes + scopes * (scopes - 1))


FAMILY = Family(
    name="mixing",
    title="Whole-layer token mixing (Kobayashi et al. 2021, 2024)",
    tables={
        "corpus": (
            "maps.h5",
            "mixing_ratio.tsv",
            "rsa.tsv",
            "ff_pairs.tsv",
            "example_maps.tsv",
            "decomposition_check.tsv",
            "propagated.h5",
            "propagated_mixing.tsv",
            "rollout.tsv",
            "prediction.tsv",
            "propagation_check.tsv",
        ),
    },
    figures=(
        Figure("mixing_ratio", "corpus", ("mixing_ratio.tsv",)),
        Figure("rsa", "corpus", ("rsa.tsv",)),
        Figure("scope_maps", "corpus", ("example_maps.tsv",)),
        Figure("ff_pairs", "corpus", ("ff_pairs.tsv",)),
        Figure("propagated_mixing", "corpus", ("propagated_mixing.tsv", "mixing_ratio.tsv")),
        Figure("rollout", "corpus", ("rollout.tsv",)),
        Figure("prediction", "corpus", ("prediction.tsv",), ("prediction_examples",)),
    ),
    map_bytes=map_bytes,
    part_bytes=part_bytes,
    shard_maps=("maps.h5",),
    # carried through the whole depth to the prediction
    every_layer=(
        "propagated.h5",
        "propagated_mixing.tsv",
        "rollout.tsv",
        "prediction.tsv",
        "propagation_check.tsv",
    ),
)
