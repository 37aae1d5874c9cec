"""The exact split of a gated activation act(G) * U over its parts (SwiGLU, GeGLU): the
integrals against high-precision quadrature (mpmath), completeness, the limits at G = 0, and
captum's Integrated Gradients as the oracle for the whole attribution."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch
from transformers.activations import ACT2FN

from attnscope.core.gated_split import (
    ANTIDERIVATIVES,
    gated_coefficients,
    path_integrals,
)

NAMES = ["silu", "gelu", "gelu_pytorch_tanh"]  # SwiGLU, GeGLU (erf), GeGLU (tanh, Gemma)


def reference_integrals(name: str, g: float) -> tuple[float, float]:
    """int_0^1 act(tg) dt and int_0^1 t act'(tg) dt at 30 digits (mpmath), from the
    activation's own formula."""
    mpmath.mp.dps = 30

    def act(x):
        if name == "silu":
            return x / (1 + mpmath.exp(-x))
        if name == "gelu":
            return x * (1 + mpmath.erf(x / mpmath.sqrt(2))) / 2
        inner = mpmath.sqrt(2 / mpmath.pi) * (x + 0.044715 * x**3)  # gelu_pytorch_tanh
        return x * (1 + mpmath.tanh(inner)) / 2

    g = mpmath.mpf(g)
    inner = mpmath.quad(lambda t: act(t * g), [0, 1])
    gate = mpmath.quad(lambda t: t * mpmath.diff(act, t * g), [0, 1])
    return float(inner), float(gate)


@pytest.mark.parametrize("name", NAMES)
def test_integrals_match_high_precision_quadrature(name):
    G = torch.tensor([-30.0, -7.5, -1.3, -0.4, -1e-3, 1e-6, 0.02, 0.9, 1.1, 3.0, 12.0, 45.0])
    inner, gate = path_integrals(ACT2FN[name], G.double(), name=name)
    for k, g in enumerate(G.tolist()):
        want_inner, want_gate = reference_integrals(name, g)
        assert inner[k].item() == pytest.approx(want_inner, rel=1e-10, abs=1e-14), (name, g)
        assert gate[k].item() == pytest.approx(want_gate, rel=1e-10, abs=1e-14), (name, g)


@pytest.mark.parametrize("name", sorted(ANTIDERIVATIVES))
def test_closed_forms_agree_with_the_quadrature(name):
    """Past |G| = 0.05 the closed form is used; the graded quadrature alone gives the same
    numbers far out (massive activations), so the activations without one are covered too."""
    G = torch.linspace(-1000, 1000, 4001, dtype=torch.float64)
    closed = path_integrals(ACT2FN[name], G, name=name)
    quadrature = path_integrals(ACT2FN[name], G, name=None)
    for a, b in zip(closed, quadrature, strict=True):
        assert torch.allclose(a, b, rtol=1e-13, atol=1e-300)


@pytest.mark.parametrize("name", NAMES)
def test_parts_sum_to_the_gated_activation_and_limits_at_zero(name):
    """Completeness in float64: sum_p (g_p c_gate + u_p c_in) = act(G) U, also where G = 0
    and where G is tiny; the limits act(0) and U act'(0)/2 at G = 0."""
    torch.manual_seed(0)
    act = ACT2FN[name]
    parts_g = torch.randn(7, 5, 64, dtype=torch.float64) * 3
    parts_u = torch.randn(7, 5, 64, dtype=torch.float64)
    parts_g[:, 0, :4] = 0  # G exactly 0 in four units of token 0
    parts_g[:, 1, :4] = 1e-9 / 7
    G, U = parts_g.sum(0), parts_u.sum(0)
    c_gate, c_in = gated_coefficients(act, G, U, name=name)
    shares = parts_g * c_gate + parts_u * c_in  # [parts, tokens, d_ff]
    assert torch.allclose(shares.sum(0), act(G) * U, rtol=1e-12, atol=1e-12)
    slope = {"silu": 0.5, "gelu": 0.5, "gelu_pytorch_tanh": 0.5}[name]  # act'(0)
    assert torch.allclose(c_in[0, :4], act(torch.zeros(4, dtype=torch.float64)))
    assert torch.allclose(c_gate[0, :4], U[0, :4] * slope / 2, rtol=1e-12)


def gated(parts_g: torch.Tensor, parts_u: torch.Tensor, act) -> torch.Tensor:
    """act(sum_p g_p) * sum_p u_p, summed over units: the scalar captum attributes."""
    return (act(parts_g.sum(1)) * parts_u.sum(1)).sum(-1)


@pytest.mark.parametrize("name", ["silu", "gelu_pytorch_tanh"])
def test_shares_equal_captums_integrated_gradients(name):
    """captum's IG over every part's g and u at once: with m midpoint steps it equals the
    m-step route, and with many steps it converges to the exact (steps = 0) shares."""
    from captum.attr import IntegratedGradients

    torch.manual_seed(1)
    act = ACT2FN[name]
    parts_g = torch.randn(1, 6, 16, dtype=torch.float64) * 2
    parts_u = torch.randn(1, 6, 16, dtype=torch.float64)
    G, U = parts_g.sum(1)[0], parts_u.sum(1)[0]
    ig = IntegratedGradients(lambda g, u: gated(g, u, act))

    def per_part(steps: int) -> torch.Tensor:
        """captum's attributions summed over units: one number per part."""
        a_g, a_u = ig.attribute(
            (parts_g, parts_u), n_steps=steps, method="riemann_middle", internal_batch_size=steps
        )
        return (a_g + a_u)[0].sum(-1)

    def ours(steps: int) -> torch.Tensor:
        c_gate, c_in = gated_coefficients(act, G, U, steps=steps, name=name)
        return (parts_g[0] * c_gate + parts_u[0] * c_in).sum(-1)

    # captum multiplies by its step sizes cast to float32 (0.05 -> 0.0500000007): 1e-7 apart
    assert torch.allclose(per_part(20), ours(20), rtol=1e-6, atol=1e-9)
    exact = ours(0)
    assert torch.allclose(per_part(4000), exact, rtol=1e-5, atol=1e-7)
    assert math.isclose(exact.sum().item(), gated(parts_g, parts_u, act).item(), rel_tol=1e-12)
    assert not torch.allclose(ours(20), exact, rtol=1e-4)  # the coarse route really differs


def test_float32_inputs_come_back_in_float32():
    G = torch.randn(3, 8)
    c_gate, c_in = gated_coefficients(ACT2FN["silu"], G, torch.randn(3, 8), name="silu")
    assert c_gate.dtype == c_in.dtype == torch.float32 and torch.isfinite(c_gate).all()
    with pytest.raises(ValueError, match="ig_steps"):
        path_integrals(ACT2FN["silu"], G, steps=-1)


def test_silu_antiderivative_far_out():
    """Past the asymptotic switch A(s) = s^2/2 - pi^2/12, continuous at the switch."""
    A = ANTIDERIVATIVES["silu"]
    s = np.array([39.999, 40.0, 40.001, 800.0])
    values = A(s)
    assert np.isfinite(values).all()
    assert values[-1] == pytest.approx(800.0**2 / 2 - math.pi**2 / 12)
    assert values[1] == pytest.approx(A(np.array([39.999]))[0] + 39.9995 * 0.001, rel=1e-9)
