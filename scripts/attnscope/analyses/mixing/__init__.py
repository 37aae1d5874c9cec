"""Whole-layer token mixing: attention, residual, LayerNorm and feed-forward decomposed exactly
(Kobayashi et al. 2021, 2024)."""
