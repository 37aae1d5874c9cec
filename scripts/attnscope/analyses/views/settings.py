"""The views family's settings (config `analyses.views`): each setting's one home, its
default, bounds and description (`core.settings.setting`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from attnscope.core.settings import setting


@dataclass(frozen=True)
class ViewsSettings:
    """One views_pages job's settings. The mixing family's settings it reads (the rule passes
    `contrast`, `Job.settings` reads the bounds from the configuration): `max_rel_residual`,
    `depth_rel_residual`, the decomposition checks' bounds per layer and through the whole
    depth; `contrast`: [target, foil] of the prediction row. `sequences`: the pages (None:
    the first `max_pages`; the rule reads them from `views.sequences` per corpus); `device`: a
    torch device string."""

    family: ClassVar[str] = "views"
    bound_family: ClassVar[str] = "mixing"
    scopes: bool = setting(
        "also show the whole-layer scopes (AttnRes ... AttnResLnFfResLn of the mixing family), "
        "computed for the viewed sequences",
        True,
    )
    ig_steps: int = setting(
        "IG steps of the feed-forward split of the scopes (0 = exact closed form)", 0, minimum=0
    )
    top_k: int = setting(
        "edges kept per query row of each stored norm/scope map (the page draws fewer by its "
        "own slider); weights per head are recomputed exactly in the page",
        16,
        minimum=1,
    )
    max_rel_residual: float = field(kw_only=True)
    depth_rel_residual: float = field(kw_only=True)
    contrast: tuple[str, ...] = ()
    sequences: tuple[int, ...] | None = None
    max_pages: int = setting(
        "pages of a corpus not named under sequences (its first sequences)", 20, minimum=1
    )
    device: str = "cpu"
