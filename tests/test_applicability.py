"""Which analyses apply to a model (`core.applicability`), decided in one place from its
outline and head kind: known answers on the tiny models of every kind of position encoding,
and no script deciding it itself."""

import ast
from pathlib import Path

import pytest

from attnscope.architectures import canonical_weights
from attnscope.core import applicability
from attnscope.core.applicability import REASONS, applies, reason
from conftest import CLASSIC, tiny_model

ROOT = Path(__file__).parents[1]
POSITIONS = ("position.corpus", "position.embeddings", "position.angles", "attend.trt_terms")
HEADS = ("heads.in_context_loss", "norms.intervention", "weights.gradients", "mixing.prediction")


@pytest.mark.parametrize("architecture", [*CLASSIC, "llama", "gemma2", "mixtral", "gpt_neox"])
def test_learned_and_rotary_positions_decide_the_position_analyses(architecture):
    """BERT's and GPT-2's anatomies add learned position rows and rotate nothing; the rotary
    decoders have no position rows and rotate q and k in every layer: the bilinear-form and
    learned-embedding analyses apply to the first, the rotary bands to the second."""
    weights = canonical_weights(tiny_model(architecture))
    learned = architecture in CLASSIC
    assert weights.learned_positions is learned
    assert weights.learned_positions is (weights.position_embeddings is not None)
    assert weights.any_rotary is (not learned)  # the views' header "rotary" as before
    assert all(applies(name, weights) is learned for name in POSITIONS)
    assert applies("position.rotary", weights) is (not learned)
    assert applies("attend.bands", weights) is (not learned)
    for name in (*POSITIONS, "position.rotary", "attend.bands"):
        assert reason(name, weights) == (None if applies(name, weights) else REASONS[name])


def test_a_layer_without_rotation_does_not_make_the_model_rotary():
    """`any_rotary` reads the per-layer rotary of the outline: a model whose layers all lost
    their rotation is not rotary (the attend bands do not apply), one rotated layer is."""
    from dataclasses import replace

    weights = canonical_weights(tiny_model("llama"))
    flat = replace(weights, layers=[replace(layer, rotary=None) for layer in weights.layers])
    assert not flat.any_rotary and reason("attend.bands", flat) == "no rotary embedding"
    one = replace(flat, layers=[weights.layers[0], *flat.layers[1:]])
    assert one.any_rotary and applies("attend.bands", one)
    assert not one.learned_positions and applies("position.rotary", one)


@pytest.mark.parametrize(
    ("lm_head", "loss", "gradients"),
    [(None, False, False), ("masked", False, True), ("causal", True, True)],
)
def test_the_head_kind_decides_the_head_analyses(lm_head, loss, gradients):
    """The in-context loss and the massive-dimension intervention need a causal LM head; the
    gradient importance and the mixing family's prediction attribution any LM head; none of
    them reads the weights."""
    assert applies("heads.in_context_loss", None, lm_head) is loss
    assert applies("norms.intervention", None, lm_head) is loss
    assert applies("weights.gradients", None, lm_head) is gradients
    assert applies("mixing.prediction", None, lm_head) is gradients
    expected = [loss, loss, gradients, gradients]
    assert [reason(name, None, lm_head) is None for name in HEADS] == expected


def test_the_reasons_are_the_tables_own():
    """The reasons the tables have carried (a "not applicable" table is compared by its text);
    the gradient table's status column says it with its prefix."""
    assert REASONS == {
        "position.corpus": "rotary model (scores are not x W^A x^T)",
        "position.embeddings": "rotary model (no position embeddings)",
        "position.angles": "rotary model (no position embeddings; scores are not x W^A x^T)",
        "position.rotary": "learned position embeddings (no rotary bands)",
        "attend.bands": "no rotary embedding",
        "attend.trt_terms": "no learned position embeddings",
        "heads.in_context_loss": "no causal language-model head (next-piece loss)",
        "norms.intervention": "no causal LM head",
        "weights.gradients": "no LM head",
        "mixing.prediction": "no LM head",
    }
    from attnscope.analyses.weights.gradients import NOT_APPLICABLE

    assert NOT_APPLICABLE == applicability.GRADIENTS == "not applicable: no LM head"


# The reasons found in the data or the configuration, which stay with their scripts.
FOUND_REASONS = {
    "no head puts over half its attention on the previous token or self",
    "layers: leaves out the last layer, whose output the head reads",
    "no groups.tsv of the attend family for this model's tables_corpus",
}


def written_reasons(path: Path) -> list[str]:
    """The literal reasons that `path` passes to `not_applicable`, "<file>:<line> <reason>"."""
    return [
        f"{path.name}:{node.lineno} {node.args[0].value}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", "")) == "not_applicable"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value not in FOUND_REASONS
    ]


def test_no_script_decides_itself_why_an_analysis_does_not_apply(tmp_path):
    """Neither an entry script nor a module of the package writes a literal reason of its own
    (a reason built from the data, an f-string, is not a literal)."""
    scripts = sorted((ROOT / "scripts").rglob("*.py"))
    assert [line for path in scripts for line in written_reasons(path)] == []
    bad = tmp_path / "bad.py"
    bad.write_text(
        'table = not_applicable("rotary model (no position embeddings)")\n'
        "table = tables.not_applicable(reason)\n"
        'table = not_applicable("layers: leaves out the last layer, whose output the head reads")\n'
    )
    assert written_reasons(bad) == ["bad.py:1 rotary model (no position embeddings)"]


def test_every_reason_is_asked_for():
    """Each analysis of the table is asked about by a script, the package or the notebook API."""
    sources = [path for path in (ROOT / "scripts").rglob("*.py") if path.name != "applicability.py"]
    text = "\n".join(path.read_text() for path in sources)
    assert [name for name in REASONS if f'"{name}"' not in text] == []
