"""Whole-layer mixing (Kobayashi et al. 2021, 2024): exact decomposition, IG split, statistics."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from attnscope.analyses.mixing.activation_split import (
    closed_form_coefficients,
    ig_coefficients,
)
from attnscope.analyses.mixing.layer_decomposition import (
    VECTOR_SCOPES,
    closing_layer_norm,
    layer_stages,
)
from attnscope.architectures import architecture, canonical_weights
from attnscope.core.store import HiddenStates
from conftest import write_tiny_store


@pytest.mark.parametrize("ig_steps", [0])
def test_every_stage_rebuilds_the_real_outputs(tmp_path, family, ig_steps):
    """sum_j z_ij + bias_i equals the real output of every stage; the last residual state equals
    the model's stored next hidden state hidden/{l+1}."""
    from attnscope.core.attention import feed_forward

    path, model = write_tiny_store(tmp_path, family)
    weights = canonical_weights(model)
    module_attention = architecture(model.config.model_type).attention_output
    with HiddenStates(path) as store:
        for l, layer in enumerate(weights.layers):
            closing = closing_layer_norm(weights.layers, weights.final_ln, l)
            X = torch.from_numpy(store.hidden(l))
            X_next = torch.from_numpy(store.hidden(l + 1))
            mask = torch.from_numpy(store.attention_mask.astype(np.int64))
            real = mask.bool()
            with torch.no_grad():
                y = module_attention(model, l, X, mask)
                h = X + y
                ln_in = layer.ln_ff(h) if layer.pre_ln else layer.ln_attn(h)
                ff = feed_forward(ln_in, layer)
                if layer.pre_ln:
                    expected = {
                        "Attn": y,
                        "AttnRes": h,
                        "AttnResLn": ln_in,
                        "AttnResLnFf": ff,
                        "AttnResLnFfRes": X_next,
                        "AttnResLnFfResLn": torch.nn.functional.layer_norm(
                            X_next, X.shape[-1:], closing.gamma, closing.beta, closing.eps
                        ),
                    }
                else:
                    expected = {
                        "Attn": y,
                        "AttnRes": h,
                        "AttnResLn": ln_in,
                        "AttnResLnFf": ff,
                        "AttnResLnFfRes": ln_in + ff,
                        "AttnResLnFfResLn": X_next,
                    }
                seen = []
                for stage in layer_stages(X, mask, layer, closing, ig_steps):
                    seen.append(stage.scope)
                    got = stage.total()[real]
                    want = expected[stage.scope][real]
                    rel = ((got - want).norm(dim=-1) / want.norm(dim=-1)).max()
                    assert rel < 1e-5, (family, l, stage.scope, float(rel))
                    invisible = ~(real[:, :, None] & real[:, None, :])
                    if layer.causal:
                        invisible |= torch.ones_like(invisible[0]).triu(1)
                    assert stage.parts[real[:, :, None] & invisible].abs().max() < 1e-6
            assert tuple(seen) == VECTOR_SCOPES


def activation_of(name: str):
    from transformers.activations import ACT2FN

    return ACT2FN[name]


ACTIVATIONS = ["gelu", "gelu_new", "gelu_pytorch_tanh", "relu"]


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("steps", [0, 7])
def test_ig_shares_equal_captum(name, steps):
    """u_p * c equals captum's IntegratedGradients attribution of every part of U = sum_p u_p
    through g (zero baselines, straight path, midpoint Riemann sum with the same steps; the
    closed form is compared with captum at many steps)."""
    from captum.attr import IntegratedGradients

    g = activation_of(name)
    torch.manual_seed(0)
    parts = tuple(torch.randn(5, 16, dtype=torch.float64) for _ in range(3))
    U = sum(parts)
    c = ig_coefficients(g, U, steps)
    ig = IntegratedGradients(lambda *p: g(sum(p)).sum(-1))
    captum_steps = steps or 4000
    expected = ig.attribute(
        parts,
        baselines=tuple(torch.zeros_like(p) for p in parts),
        n_steps=captum_steps,
        method="riemann_middle",
    )
    tolerance = 1e-6 if steps else 1e-5  # captum builds its alphas in float32
    for p, e in zip(parts, expected, strict=True):
        assert torch.allclose(p * c, e, atol=tolerance, rtol=0), (name, steps)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_riemann_converges_to_closed_form_and_closed_form_is_complete(name):
    """m-step IG approaches g(U)/U as m grows (midpoint rule: error O(1/m^2) for smooth g);
    sum_p u_p c = g(U) exactly for the closed form; U = 0 gives g'(0)."""
    g = activation_of(name)
    torch.manual_seed(1)
    U = torch.randn(200, dtype=torch.float64) * 3
    U[0] = 0.0
    exact = closed_form_coefficients(g, U)
    assert torch.allclose(U * exact, g(U), atol=1e-12)
    assert float(exact[0]) == pytest.approx(0.0 if name == "relu" else 0.5)
    errors = [float((ig_coefficients(g, U, m) - exact).abs().max()) for m in (4, 16, 64, 256)]
    assert all(b <= a for a, b in zip(errors, errors[1:], strict=False)), errors
    assert errors[-1] < (1e-2 if name == "relu" else 1e-4), errors


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_stages_rebuild_outputs_with_every_activation(tmp_path, name):
    """The FF split is exact with the closed form for every activation variant."""
    from attnscope.core.attention import layer_forward

    path, model = write_tiny_store(tmp_path, "bert")
    weights = canonical_weights(model)
    layer = dataclasses.replace(weights.layers[0], activation=activation_of(name))
    with HiddenStates(path) as store:
        X = torch.from_numpy(store.hidden(0))
        mask = torch.from_numpy(store.attention_mask.astype(np.int64))
    with torch.no_grad():
        want = layer_forward(X, mask, layer)[mask.bool()]
        *_, last = layer_stages(X, mask, layer)
        got = last.total()[mask.bool()]
    assert ((got - want).norm(dim=-1) / want.norm(dim=-1)).max() < 1e-5
