"""A corpus's settings as one model reads them: the corpus's own block, with the model's own
keys for it (`models.<model>.corpora.<corpus>`) and cut to the model's context."""

from __future__ import annotations


def corpus_for_model(config: dict, model: str, corpus: str) -> dict:
    """The settings of `corpus` as `model` reads it: the corpus's own block, with the keys the
    model's `corpora:` block gives for it in their place (a deep model reads fewer sequences;
    a model without [MASK] reads a masked corpus with mask_rate 0)."""
    own = dict(config["corpora"][corpus])
    return own | config["models"][model].get("corpora", {}).get(corpus, {})


def cut_to_context(settings: dict, limit: int) -> dict:
    """A corpus's settings (`corpus_for_model`) as a model taking at most `limit` positions
    reads them: with `cut_to_context`, max_length lowered to `limit` where it is longer (the
    default `wiki1024` on a 512-position encoder); otherwise as they are."""
    if settings.get("cut_to_context") and settings["max_length"] > limit:
        return settings | {"max_length": limit}
    return settings
