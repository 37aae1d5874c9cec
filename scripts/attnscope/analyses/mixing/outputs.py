"""Outputs of the whole-layer mixing analysis (Kobayashi et al. 2021, 2024)."""

from attnscope.maps.scopes import SCOPES
from attnscope.maps.storage import map_bytes as stored_map_bytes
from attnscope.pipeline.job_memory import Memory, Sizes, budget_bytes
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


def compute_bytes(size: Sizes, budget_mb: float, settings: dict) -> int:
    """A + 10 M + min(budget, 4 B n^2 d 4): alpha, the seven scope maps, the query chunks
    of the `layer_decomposition.STAGE_COPIES` stages (memory_budget_mb at most)."""
    chunks = min(budget_bytes(budget_mb), 4 * size.one_map * size.d)
    return size.attn_weights + 10 * size.one_map + chunks


def own_batch(config: dict, settings: dict) -> int:
    """The family's own `batch_size`, else the configuration's."""
    return settings.get("batch_size", config["batch_size"])


def contrast(config: dict, model):
    """`analyses.mixing.contrast` is two different pieces of the vocabulary of `model` if it
    has an LM head (`core.tokens.contrast_ids`; a model without one predicts nothing). Reads
    the tokenizer only when a contrast is set (the views read it too, so whether or not the
    family is enabled)."""
    pieces = config.get("analyses", {}).get("mixing", {}).get("contrast")
    if not pieces:
        return
    tokenizer = model.head_tokenizer()
    if tokenizer is None:
        return
    from attnscope.core.tokens import contrast_ids

    try:
        contrast_ids(tokenizer, pieces)
    except ValueError as error:
        yield f"model {model.name!r}: {error}"


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
    jobs={
        "mixing_shard": Memory(unestimated="a layer shard's part of mixing_compute"),
        "mixing_compute": Memory(compute_bytes, batch=own_batch),
        "mixing_tables": Memory(unestimated="tables read back from maps.h5, no model"),
        "mixing_propagate": Memory(
            unestimated="no formula yet: memory_budget_mb and per layer B n^2 float64 norms"
        ),
    },
    model_checks=contrast,
)
