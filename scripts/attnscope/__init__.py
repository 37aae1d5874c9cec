"""attnscope: analyses of what attention heads in transformer language models do.

The workflow (Snakefile) runs every analysis on corpora; the same functions are one call away
in a notebook (`attnscope.api`):

    import attnscope
    model = attnscope.load()                          # the embedded MiniLM, or a model folder
    attnscope.view(model, "The cat sat on the mat.")  # head, model and neuron views inline
    attnscope.decompose(model, ["The cat sat.", "It slept."]).maps["AttnResLnFf"]
    attnscope.norms(model, "The cat sat.").summed     # [L, n, n]
    attnscope.head_statistics(model, ["The cat sat.", "A dog ran."])
    attnscope.attend(model, "The cat sat.", layer=3, head=5).terms   # [n, n, C, C]
    attnscope.atlas(model).roles                      # head roles; the atlas page inline

The API is imported on first use, so that `import attnscope.core...` in a rule stays light.
"""

__version__ = "0.1.0"

API = ("load", "view", "decompose", "norms", "head_statistics", "states", "attend", "atlas")
__all__ = [*API, "__version__"]


def __getattr__(name: str):
    if name in API:
        from attnscope import api

        return getattr(api, name)
    raise AttributeError(f"module 'attnscope' has no attribute {name!r}")
