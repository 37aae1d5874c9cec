"""The gradient analysis with one layer in memory: dL/dX carried back layer by layer gives the
whole-model backward's table."""

import numpy as np
import pytest

from attnscope.analyses.weights.gradients import gradient_importance
from attnscope.analyses.weights.settings import GradientSettings
from attnscope.analyses.weights.streamed_backward import streamed_gradient_importance
from attnscope.architectures import prediction_head
from attnscope.core.store import HiddenStates
from attnscope.model.extract import ExtractSettings, extract
from attnscope.model.streamed_weights import streamed_head, streamed_model
from conftest import tiny_model, write_tiny_encoded

MASK_ID = 5  # any id of the tiny vocabularies stands in for [MASK]
HEADS = {"bert": "mlm", "roberta": "mlm"}  # the others: causal LMs


@pytest.mark.parametrize(
    "architecture", ["bert", "roberta", "gpt2", "llama", "gemma2", "mixtral", "gpt_neox", "olmo2"]
)
def test_layerwise_backward_equals_the_whole_model_backward(tmp_path, architecture):
    head = HEADS.get(architecture, "causal")
    model = tiny_model(architecture, head=head, layers=3)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", architecture, batch=5, length=16)
    extract(model.base_model, encoded, tmp_path / "states.h5", ExtractSettings(batch_size=2))
    masked = head == "mlm"
    mask_id = MASK_ID if masked else None
    run = GradientSettings(batch_size=2, mask_rate=0.3, seed=0)
    with HiddenStates(tmp_path / "states.h5") as store:
        whole = gradient_importance(model, prediction_head(model), store, mask_id, run)
        _, weights = streamed_model(folder, "cpu")
        head = streamed_head(folder, "masked" if masked else "causal", "cpu")
        streamed = streamed_gradient_importance(
            folder, weights, head, store, mask_id, run, scratch_folder=tmp_path
        )
    assert len(whole) == 3 * 4 and list(streamed.columns) == list(whole.columns)
    for column in ("layer", "category", "n_sequences", "status"):
        assert streamed[column].tolist() == whole[column].tolist()
    for column in ("importance", "attention"):
        expected = whole[column].to_numpy()
        assert np.isfinite(expected).all() and expected.max() > 0
        scale = np.abs(expected).max()
        np.testing.assert_allclose(streamed[column], expected, rtol=1e-4, atol=1e-6 * scale)
    assert not list(tmp_path.glob("gradients-*")), "the scratch folder was not removed"
