"""The head over the vocabulary in chunks (`core.lm_head`): the same losses and gradients as
the logits built whole in float64, with a chunk of rows, of the vocabulary, or of both."""

import pytest
import torch

from attnscope.core.canonical import PredictionHead
from attnscope.core.lm_head import chunk_shape, cross_entropy, sequence_losses, unembed

V, D = 1000, 16


def random_head(softcap=None, multiplier=1.0) -> PredictionHead:
    g = torch.Generator().manual_seed(0)
    W_U = torch.randn(D, V, generator=g)
    return PredictionHead(W_U, torch.randn(V, generator=g), multiplier=multiplier, softcap=softcap)


def direct(head: PredictionHead, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Every logit at once, in float64."""
    z = (h.double() @ head.W_U.double() + head.b_U.double()) * head.multiplier
    if head.softcap is not None:
        z = torch.tanh(z / head.softcap) * head.softcap
    return torch.nn.functional.cross_entropy(z, targets, reduction="none")


@pytest.mark.parametrize("chunk_bytes", [4 * V * 7, 4 * V - 4, 4 * 37, 10**9])
@pytest.mark.parametrize("softcap, multiplier", [(None, 1.0), (5.0, 0.5)])
def test_chunked_cross_entropy_equals_the_whole_float64_one(chunk_bytes, softcap, multiplier):
    head = random_head(softcap, multiplier)
    h = torch.randn(23, D, generator=torch.Generator().manual_seed(1)) * 3
    targets = torch.randint(0, V, (23,), generator=torch.Generator().manual_seed(2))
    ours = cross_entropy(head, h, targets, chunk_bytes)
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours.double(), direct(head, h, targets), rtol=2e-6, atol=1e-5)


def test_chunk_shape_bounds_the_logits_and_the_weight_slice():
    assert chunk_shape(V, 4, 4 * V * 7) == (7, V)  # whole rows
    assert chunk_shape(V, D, 4 * V * 7) == (7, 437)  # W_U [16, 437] in float32: 28,000 bytes
    rows, columns = chunk_shape(262_144, 640, 64 * 2**20)
    assert rows == 64 and rows * columns * 4 <= 64 * 2**20 and 640 * columns * 4 <= 64 * 2**20
    assert chunk_shape(V, 2, 40) == (1, 5)  # one row, in slices of the vocabulary


@pytest.mark.parametrize("chunk_bytes", [4 * V * 3, 4 * 100])
def test_gradients_through_the_chunks_equal_the_whole_ones(chunk_bytes):
    head = random_head(softcap=7.0)
    g = torch.Generator().manual_seed(3)
    h = torch.randn(2, 9, D, generator=g, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, V, (2, 9), generator=g)
    chosen = torch.rand(2, 9, generator=g) < 0.6
    chosen[1] = False  # a sequence without any chosen position: loss 0
    ours = cross_entropy(head, h[chosen], labels[chosen], chunk_bytes)
    (ours,) = torch.autograd.grad(ours.sum(), h)
    (want,) = torch.autograd.grad(direct(head, h[chosen], labels[chosen]).sum(), h)
    torch.testing.assert_close(ours, want, rtol=1e-10, atol=1e-12)
    losses = sequence_losses(head, h, labels, chosen)
    assert losses[1].item() == 0.0
    mean = direct(head, h[0][chosen[0]], labels[0][chosen[0]]).mean()
    torch.testing.assert_close(losses[0], mean)


def test_a_batch_without_any_chosen_position_has_loss_0_and_a_zero_gradient():
    head = random_head()
    h = torch.randn(2, 5, D, requires_grad=True)
    chosen = torch.zeros(2, 5, dtype=torch.bool)
    losses = sequence_losses(head, h, torch.zeros(2, 5, dtype=torch.long), chosen)
    losses.sum().backward()
    assert losses.tolist() == [0.0, 0.0] and (h.grad == 0).all()


def test_unembed_gives_the_logits_of_the_columns_asked_for():
    head = random_head(softcap=3.0, multiplier=2.0)
    h = torch.randn(4, D)
    whole = unembed(head, h)
    torch.testing.assert_close(unembed(head, h, slice(10, 20)), whole[:, 10:20])
    torch.testing.assert_close(unembed(head, h, torch.tensor([5, 999])), whole[:, [5, 999]])


@pytest.mark.parametrize("architecture, kind", [("bert", "mlm"), ("gemma2", "causal")])
def test_reference_logits_at_positions_are_the_models_own(tmp_path, architecture, kind):
    """The prediction's reference logits, built at the attributed positions only (the model's
    unembedding fed those alone, or the head on the stored X_L), are the whole forward's
    logits there (BERT's transform, Gemma-2's soft-cap)."""
    from attnscope import architectures
    from attnscope.architectures import canonical_weights, prediction_head
    from attnscope.core.store import HiddenStates
    from attnscope.maps.prediction import model_logits, stored_logits
    from conftest import write_tiny_store

    path, model = write_tiny_store(tmp_path, architecture, batch=4, length=12, head=kind)
    head, weights = prediction_head(model), canonical_weights(model)
    rows, positions = torch.tensor([0, 2, 2, 3]), torch.tensor([1, 0, 5, 3])
    with HiddenStates(path) as store:
        batch = store.batch(0, 0, 4, store.length)
        ids = torch.from_numpy(batch.input_ids.astype("int64"))
        types = torch.from_numpy(store.token_type_ids[:4].astype("int64"))
        inputs = architectures.architecture(model.config.model_type).model_inputs(
            model, ids, batch.mask, types
        )
        with torch.no_grad():
            whole = model(**inputs).logits[rows, positions]
        ours = model_logits(model, store, batch, None, rows, positions)
        stored = stored_logits(head, weights, store, batch, None, rows, positions)
    assert ours.shape == whole.shape == (4, model.config.vocab_size)
    torch.testing.assert_close(ours, whole, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(stored, whole, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "architecture, kind",
    [("bert", "mlm"), ("gpt2", "causal"), ("llama", "causal"), ("gpt_neox", "causal")],
)
def test_extraction_with_the_head_loaded_never_builds_logits(architecture, kind):
    """The residual states of a model loaded with its LM head (the sink card's control
    extraction) come from the bare model: the unembedding never runs, and the states are
    the bare model's."""
    from attnscope import architectures
    from attnscope.architectures import base_model
    from conftest import tiny_batch, tiny_model

    model = tiny_model(architecture, head=kind)
    ids, mask = tiny_batch(architecture)
    arch = architectures.architecture(model.config.model_type)
    inputs = arch.model_inputs(model, ids, mask, torch.zeros_like(ids))
    calls = []
    model.get_output_embeddings().register_forward_pre_hook(lambda m, args: calls.append(1))
    states = arch.residual_states(model, inputs)
    assert not calls
    bare = arch.residual_states(base_model(model), inputs)
    for got, want in zip(states, bare, strict=True):
        torch.testing.assert_close(got, want)
