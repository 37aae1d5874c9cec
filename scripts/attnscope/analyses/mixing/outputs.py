"""Outputs of the whole-layer mixing analysis (Kobayashi et al. 2021, 2024)."""

from attnscope.pipeline.outputs import Family, Figure

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
)
