"""Names of the whole-layer scopes (Kobayashi et al. 2021, 2024), without importing torch:
the configuration checks read them before any job."""

VECTOR_SCOPES = (
    "Attn",
    "AttnRes",
    "AttnResLn",
    "AttnResLnFf",
    "AttnResLnFfRes",
    "AttnResLnFfResLn",
)
WEIGHT_SCOPES = ("Attn-w", "AttnRes-w")
SCOPES = ("Attn-w", "Attn", "AttnRes-w", "AttnRes", *VECTOR_SCOPES[2:])
PROPAGATED = "Propagated"  # the decomposition carried through the depth (maps.propagation)
