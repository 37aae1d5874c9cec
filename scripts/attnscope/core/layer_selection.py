"""The `layers:` setting: which layers are stored and analysed (imports nothing heavy, so the
workflow's own environment checks it before any job)."""

from __future__ import annotations


class LayerSelectionError(ValueError):
    """A `layers:` setting the model cannot take (a layer it does not have)."""


def selected_layers(setting, n_layers: int, model: str = "the model") -> list[int]:
    """The 0-based layers that the `layers:` setting selects of a model of `n_layers` layers,
    in order: `all` (or None) every layer, a list its 1-based layer numbers."""
    if setting in (None, "all"):
        return list(range(n_layers))
    beyond = sorted(l for l in setting if not 1 <= l <= n_layers)
    if beyond:
        raise LayerSelectionError(
            f"config: layers names layer {beyond[-1]}, but {model} has {n_layers} layers "
            f"(1 to {n_layers})"
        )
    return sorted({l - 1 for l in setting})


def layer_setting(setting, n_layers: int | None = None):
    """The `layers:` setting in one spelling: `all` when it names every one of a model's
    `n_layers` layers (None: depth not known yet, so a list stays a list), else its 1-based
    layers sorted without repeats. Equal selections then give equal rule params."""
    if setting in (None, "all"):
        return "all"
    layers = sorted(set(setting))
    return "all" if n_layers is not None and layers == list(range(1, n_layers + 1)) else layers


def whole_model(setting, n_layers: int | None) -> bool:
    """Whether the `layers:` setting selects every layer of a model of `n_layers` layers
    (a list naming each of them included; a list of a model of unknown depth: False)."""
    return layer_setting(setting, n_layers) == "all"


def stored_states(layers: list[int], n_layers: int) -> list[int]:
    """The states `hidden/{s}` a store keeps for the 0-based `layers`: each layer's input X_l
    (s = l), and the model's last output (s = n_layers) when its last layer is among them.
    Every state 0..n_layers when every layer is."""
    return sorted(set(layers) | ({n_layers} if n_layers - 1 in layers else set()))
