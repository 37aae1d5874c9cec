"""Split a gated activation act(G) * U, G = sum_p g_p, U = sum_p u_p, into one share per part.

Gated feed-forward blocks (SwiGLU in Llama, Mistral, Qwen; GeGLU in Gemma) compute
down(act(G) * U) with G = z W_gate and U = z W_in, element-wise over the d_ff units. Integrated
Gradients from the zero baseline along the straight path over all parts together
(G(t) = tG, U(t) = tU) gives part p, per element,

    g_p * c_gate + u_p * c_in,
    c_gate = U * int_0^1 t act'(tG) dt = U * (G act(G) - A(G)) / G^2
    c_in   =     int_0^1 act(tG) dt    = A(G) / G

with A the antiderivative of act with A(0) = 0. Both coefficients depend on the query token only
(on its G and U), never on the part, so they are computed once per token. Completeness:
sum_p (g_p c_gate + u_p c_in) = G c_gate + U c_in = act(G) * U exactly (the integrals meet
through integration by parts). At G = 0 the limits are c_in = act(0), c_gate = U act'(0) / 2.

How the integrals are evaluated (`steps = 0`), in float64:
    closed form   SiLU: A(s) = s softplus(s) + Li2(-e^s) + pi^2/12, Li2(-e^s) = scipy's
                  spence(1 + e^s), and s^2/2 - pi^2/12 past s = 40 (the rest is below e^-40);
                  GELU (erf): A(s) = (s^2 Phi(s) - Phi(s) + s phi(s) + 1/2) / 2. Used where
                  |G| > 0.05: near 0, A(G) ~ G^2/4 is a difference of O(1) numbers, so its
                  rounding error grows like 1e-16 / G^2 (1.6e-13 relative at 0.05).
    quadrature    every other activation, and |G| <= 0.05 for these two: Gauss-Legendre with NODES
                  nodes on each of the panels [0, 2^-J], [2^-J, 2^-J+1], ..., [1/2, 1] in t, of
                  act(tG) and t act'(tG). The panels shrink towards t = 0, where act(tG) turns
                  within |tG| of a few units: for SiLU and GELU it agrees with the closed forms
                  to 1e-13 relative up to |G| = 1000 (tests/test_gated_split.py).
With `steps = m` both integrals are the midpoint Riemann sums (1/m) sum_k of the integrands at
a_k = (k + 1/2)/m, which is what captum's IntegratedGradients (`riemann_middle`) computes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from attnscope.core.activation_split import derivative

Activation = Callable[[torch.Tensor], torch.Tensor]
HALVINGS, NODES = 12, 12  # Gauss-Legendre panels [0, 2^-12], ..., [1/2, 1]: 156 points
CLOSED_FORM_FROM = 0.05  # |G| above which a closed form replaces the quadrature (at 1.0,
# 73% of a random Llama layer's gates went to the quadrature and it took 8x longer)
SILU_ASYMPTOTIC_FROM = 40.0


def silu_antiderivative(s: np.ndarray) -> np.ndarray:
    """A(s) = int_0^s x sigmoid(x) dx, float64."""
    from scipy.special import spence

    s = np.asarray(s, dtype=np.float64)
    large = s > SILU_ASYMPTOTIC_FROM
    t = np.where(large, 0.0, s)  # e^s stays finite in the branch that is used
    exact = t * np.logaddexp(0.0, t) + spence(1.0 + np.exp(t)) + math.pi**2 / 12
    return np.where(large, s * s / 2 - math.pi**2 / 12, exact)


def gelu_antiderivative(s: np.ndarray) -> np.ndarray:
    """A(s) = int_0^s x Phi(x) dx for the exact (erf) GELU, float64."""
    from scipy.special import ndtr

    s = np.asarray(s, dtype=np.float64)
    phi = np.exp(-s * s / 2) / math.sqrt(2 * math.pi)
    Phi = ndtr(s)
    return (s * s * Phi - Phi + s * phi + 0.5) / 2


# transformers' `hidden_act` names whose antiderivative has a closed form
ANTIDERIVATIVES = {
    "silu": silu_antiderivative,
    "swish": silu_antiderivative,
    "gelu": gelu_antiderivative,
}


def _quadrature_points(dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Gauss-Legendre nodes t and weights w on the graded panels of [0, 1].
    [(HALVINGS + 1) * NODES] each."""
    x, w = np.polynomial.legendre.leggauss(NODES)
    edges = np.r_[0.0, 2.0 ** -np.arange(HALVINGS, -1, -1)]
    left, width = edges[:-1, None], np.diff(edges)[:, None]
    t = (left + (x[None, :] + 1) * width / 2).ravel()
    weights = (w[None, :] * width / 2).ravel()
    return (torch.tensor(v, dtype=dtype, device=device) for v in (t, weights))


def _sums(activation: Activation, G: torch.Tensor, t: torch.Tensor, w: torch.Tensor):
    """(sum_k w_k act(t_k G), sum_k w_k t_k act'(t_k G)) over the points t, in groups that
    keep the path points x elements near a million."""
    inner = torch.zeros_like(G)
    gate = torch.zeros_like(G)
    group = max(1, (1 << 20) // max(1, G.numel()))
    for k0 in range(0, len(t), group):
        tk = t[k0 : k0 + group].reshape(-1, *([1] * G.dim()))
        wk = w[k0 : k0 + group].reshape(-1, *([1] * G.dim()))
        points = tk * G
        inner += (wk * activation(points)).sum(0)
        gate += (wk * tk * derivative(activation, points)).sum(0)
    return inner, gate


def path_integrals(
    activation: Activation, G: torch.Tensor, steps: int = 0, name: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(int_0^1 act(tG) dt, int_0^1 t act'(tG) dt) per element of G, in float64.

    steps = 0: closed form for `name` in ANTIDERIVATIVES where |G| > CLOSED_FORM_FROM, else
    composite Gauss-Legendre; steps = m: the midpoint Riemann sums.  Same shape as G.
    """
    if steps < 0:
        raise ValueError(f"ig_steps must be >= 0, got {steps}")
    G = G.detach().to(torch.float64)
    if steps:
        t = (torch.arange(steps, dtype=G.dtype, device=G.device) + 0.5) / steps
        return _sums(activation, G, t, torch.full_like(t, 1.0 / steps))
    t, w = _quadrature_points(G.dtype, G.device)
    antiderivative = ANTIDERIVATIVES.get(name or "")
    if antiderivative is None:
        return _sums(activation, G, t, w)
    inner, gate = torch.empty_like(G), torch.empty_like(G)
    near = G.abs() <= CLOSED_FORM_FROM
    inner[near], gate[near] = _sums(activation, G[near], t, w)
    g = G[~near]
    A = torch.from_numpy(antiderivative(g.cpu().numpy())).to(G.device)
    inner[~near] = A / g
    gate[~near] = (activation(g) - A / g) / g  # (G act(G) - A(G)) / G^2
    return inner, gate


def gated_coefficients(
    activation: Activation,
    G: torch.Tensor,
    U: torch.Tensor,
    steps: int = 0,
    name: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(c_gate, c_in) of one token's gated activation; part p's share is
    g_p * c_gate + u_p * c_in.  G, U [..., d_ff]; both results [..., d_ff] in G's dtype."""
    inner, gate = path_integrals(activation, G, steps, name)
    return (U.to(torch.float64) * gate).to(G.dtype), inner.to(G.dtype)
