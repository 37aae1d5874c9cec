"""The disk estimate: what a run will write, against the disk's real free space."""

from pathlib import Path

import pytest

from attnscope.model.disk_space import DiskSpaceError, free_bytes, hidden_state_bytes, require_space
from attnscope.model.extract import ExtractSettings, extract
from conftest import tiny_model, write_tiny_encoded


def test_hidden_state_estimate_is_the_full_store(tmp_path):
    """Sequences of the full length fill every chunk: the states take the estimate exactly."""
    import h5py

    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "llama", batch=5, length=32)
    with h5py.File(encoded, "a") as f:
        f["attention_mask"][...] = 1
    extract(
        tiny_model("llama"),
        encoded,
        tmp_path / "hs.h5",
        ExtractSettings(batch_size=2, dtype="bfloat16"),
    )
    with h5py.File(tmp_path / "hs.h5") as f:
        n_layers = len(f["hidden"]) - 1
        stored = sum(f[f"hidden/{l}"].id.get_storage_size() for l in range(n_layers + 1))
        d_model = f["hidden/0"].shape[-1]
    assert stored == hidden_state_bytes(n_layers + 1, 5, 32, d_model, "bfloat16")


def test_a_job_that_would_overfill_its_disk_stops_naming_the_file(tmp_path):
    require_space(tmp_path / "small.h5", 1)
    with pytest.raises(DiskSpaceError, match="big.h5 needs up to .* GB free"):
        require_space(tmp_path / "big.h5", free_bytes(tmp_path) + 10**9)


def test_a_layer_subset_is_sized_by_its_states_and_maps(tmp_path):
    """MiniLM (6 layers) with `layers: [2, 6]`: the store is 3 of the 7 states (the inputs of
    layers 2 and 6, and the last output), mixing's maps 2 of the 6 layers', and the
    propagation through the depth, which is not made, is not counted."""
    import yaml
    from snakemake.utils import validate

    from attnscope.analyses.family import families
    from attnscope.pipeline.disk_estimate import planned_files

    root = Path(__file__).parents[1]
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    validate(config, str(root / "config/schema.yaml"))  # fills in the defaults
    config["models"] = {"minilm-l6": config["models"]["minilm-l6"]}
    sizes = {}
    for layers in ("all", [2, 6], [6, 5, 4, 3, 2, 1]):
        planned = planned_files(dict(config, layers=layers), families(), tmp_path / "results")
        sizes[str(layers)] = {str(p.path.relative_to(tmp_path)): p.size for p in planned}
    whole, subset = sizes["all"], sizes["[2, 6]"]
    assert sizes["[6, 5, 4, 3, 2, 1]"] == whole  # a list of every layer is the whole model
    store = "results/minilm-l6/wiki/hidden_states.h5"
    assert subset[store] * 7 == whole[store] * 3
    maps = "results/minilm-l6/wiki_masked/mixing/maps.h5"
    assert subset[maps] * 6 == whole[maps] * 2
    propagated = "results/minilm-l6/wiki_masked/mixing/propagated.h5"
    assert whole[propagated] > 0 and propagated not in subset


def test_layer_shards_files_are_planned_beside_the_maps(tmp_path):
    """Issue 35, item 5: MiniLM with `shards: 2`: each sharded family's two `{shard}.pkl` and,
    where it writes maps, two `{shard}.h5` that together are as large as the gathered maps
    (3 of the 6 layers each); with one shard, none."""
    import yaml
    from snakemake.utils import validate

    from attnscope.analyses.family import families
    from attnscope.pipeline.disk_estimate import planned_files

    root = Path(__file__).parents[1]
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    validate(config, str(root / "config/schema.yaml"))
    config["models"] = {"minilm-l6": config["models"]["minilm-l6"]}  # no GGUF folder to plan
    results = tmp_path / "results"
    one = {
        p.path.relative_to(results).as_posix(): p.size
        for p in planned_files(config, families(), results)
    }
    two = planned_files(dict(config, shards=2), families(), results)
    sizes = {p.path.relative_to(results).as_posix(): p.size for p in two}
    assert not [f for f in one if "/shards/" in f]
    folder = "minilm-l6/wiki_masked/mixing"
    assert sizes[f"{folder}/shards/1.h5"] == sizes[f"{folder}/shards/2.h5"]
    assert 2 * sizes[f"{folder}/shards/1.h5"] == sizes[f"{folder}/maps.h5"]
    for family in ("norms", "weights"):
        assert sizes[f"minilm-l6/wiki/{family}/shards/2.pkl"] > 0
    assert "minilm-l6/wiki/weights/shards/1.h5" not in sizes
    norms = "minilm-l6/wiki/norms"
    assert (
        sizes[f"{norms}/shards/1.h5"] + sizes[f"{norms}/shards/2.h5"]
        == sizes[f"{norms}/attn_n_maps.h5"]
    )


def minilm_config(**corpora) -> dict:
    """config/config.yaml with the schema's defaults, MiniLM alone, the data mirror, and the
    given corpora's settings over the built-in ones."""
    import os

    import yaml
    from snakemake.utils import validate

    root = Path(__file__).parents[1]
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    validate(config, str(root / "config/schema.yaml"))
    config["models"] = {"minilm-l6": config["models"]["minilm-l6"]}
    config["mirror"] = os.environ.get("ATTNSCOPE_MIRROR", str(root.parent / "shared" / "data"))
    for name, settings in corpora.items():
        config["corpora"][name] |= settings
    return config


def test_an_unreachable_n_sequences_is_sized_by_what_the_data_holds(tmp_path):
    """Item m16: wiki with n_sequences 10^7 (WikiText-2 has about 2,000 paragraph pairs) is
    sized as the pairs its data files hold, not at face value, and the shortfall is printed
    with the estimate (the run's console), naming the corpus and n_sequences."""
    import io

    from attnscope.analyses.family import families
    from attnscope.data.corpora.wiki import most_sequences
    from attnscope.pipeline.disk_estimate import check_disk_space, planned_files

    config = minilm_config(wiki={"n_sequences": 10**7})
    files = [f"{config['mirror']}/wikitext-2/{split}.txt" for split in ("valid", "test")]
    pairs = most_sequences(files, {})
    results = tmp_path / "results"
    sizes = {p.path: p.size for p in planned_files(config, families(), results)}
    store = results / "minilm-l6/wiki/hidden_states.h5"
    assert sizes[store] == hidden_state_bytes(7, pairs, 128, 384, "float32")
    out = io.StringIO()
    check_disk_space(config, families(), results, out)
    assert f"corpus 'wiki': n_sequences 10000000, but its data can yield at most {pairs}" in (
        out.getvalue()
    )
    # a reachable n_sequences is sized at face value, without a warning
    config = minilm_config(wiki={"n_sequences": 16})
    sizes = {p.path: p.size for p in planned_files(config, families(), results)}
    assert sizes[store] == hidden_state_bytes(7, 16, 128, 384, "float32")


def test_a_target_that_writes_no_states_is_not_blocked_by_their_size(tmp_path, monkeypatch):
    """Item m16: with the run's jobs known, only the files they make count: encoding alone
    passes on a disk without room for the states, which still stop the whole run; the
    refusal names what drives the layer shards' files (m25)."""
    import io

    import attnscope.pipeline.disk_estimate as disk
    from attnscope.analyses.family import families

    monkeypatch.setattr(disk, "free_bytes", lambda results: 1000)
    config = dict(minilm_config(), shards=2)
    results = tmp_path / "results"
    encoded = {str(results / "minilm-l6/wiki/encoded.h5")}
    assert disk.check_disk_space(config, families(), results, io.StringIO(), encoded) == 0
    with pytest.raises(DiskSpaceError, match="spearman_sample_size") as refused:
        disk.check_disk_space(config, families(), results, io.StringIO())
    assert "fewer shards" in str(refused.value)


def test_the_most_sequences_of_constructed_data(tmp_path):
    """Item m16: paragraph pairs within articles (an odd last paragraph left out), windows of
    at most (UTF-8 bytes + a space piece per word) / (max_length - 1), sentence pairs per
    document, GAP rows."""
    from attnscope.data.corpora import KINDS

    wiki = tmp_path / "wiki.txt"
    wiki.write_text(
        " = A = \n\n p one \n p two \n p three \n = = Sub = = \n p four \n"
        " = B = \n q one \n q two \n"
    )
    # A's four paragraphs (a sub-heading does not end an article) and B's two: (2 + 1) x 2
    assert KINDS["wiki"].most_sequences([str(wiki)] * 2, {}) == 6
    # 12 words of 27 bytes a file: 39 pieces at most; 78 in both files, 26 windows of 3
    assert KINDS["wiki_windows"].most_sequences([str(wiki), str(wiki)], {"max_length": 4}) == 26
    conllu = tmp_path / "ewt.conllu"
    sentence = "# sent_id = {}\n1\tHi\thi\tINTJ\t_\t_\t0\troot\t_\t_\n\n"
    documents = ["# newdoc id = a\n" + sentence.format(1) + sentence.format(2) + sentence.format(3)]
    documents.append("# newdoc id = b\n" + sentence.format(4))
    conllu.write_text("".join(documents))
    assert KINDS["ewt"].most_sequences([str(conllu), str(conllu)], {}) == 6  # (2 + 1) x 2
    gap = tmp_path / "gap.tsv"
    header = "ID Text Pronoun Pronoun-offset A A-offset A-coref B B-offset B-coref".split()
    gap.write_text("\t".join(header) + "\n" + "\t".join(["x"] * 10) + "\n")
    assert KINDS["gap"].most_sequences([str(gap)] * 3, {}) == 3
    assert KINDS["clark"].most_sequences([], {}) is None


def test_a_corpus_cut_to_context_is_sized_at_the_models_length(tmp_path):
    """The default wiki1024 (cut_to_context) on MiniLM (512 positions): planned exactly as a
    corpus of 512 pieces, not 1,024."""
    import yaml
    from snakemake.utils import validate

    from attnscope.analyses.family import families
    from attnscope.pipeline.disk_estimate import planned_files

    root = Path(__file__).parents[1]
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    validate(config, str(root / "config/schema.yaml"))
    config["models"] = {"minilm-l6": config["models"]["minilm-l6"]}
    results = tmp_path / "results"

    def sizes(corpus: dict) -> dict:
        corpora = dict(config["corpora"], wiki1024=corpus)
        planned = planned_files(dict(config, corpora=corpora), families(), results)
        folder = results / "minilm-l6/wiki1024"
        return {
            p.path.relative_to(folder).as_posix(): p.size
            for p in planned
            if folder in p.path.parents
        }

    cut = sizes(config["corpora"]["wiki1024"])
    assert cut["hidden_states.h5"] > 0 and cut["norms/attn_n_maps.h5"] > 0
    assert cut == sizes(dict(config["corpora"]["wiki1024"], max_length=512, cut_to_context=False))


def test_a_gguf_still_to_dequantise_counts_its_float32_folder(tmp_path, monkeypatch):
    """Issue M15: the disk estimate counts the float32 folder a GGUF dequantises into (4 bytes
    per weight element; the folder's model.safetensors is that plus its header) until that
    folder is made; a disk too small for it stops the run before any job."""
    import yaml
    from snakemake.utils import validate

    import attnscope.pipeline.disk_estimate as disk_estimate
    from attnscope.analyses.family import families
    from attnscope.model.sources import build_manifest
    from attnscope.pipeline.disk_estimate import check_disk_space, planned_files
    from conftest import write_tiny_gguf_model

    path, weights = write_tiny_gguf_model(tmp_path / "gguf")
    monkeypatch.chdir(tmp_path)
    root = Path(__file__).parents[1]
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    validate(config, str(root / "config/schema.yaml"))
    config["models"] = {"tiny": {"source": "path", "path": str(path)}}
    for name in config["analyses"]:
        config["analyses"][name]["enabled"] = False
    (planned,) = planned_files(config, families(), Path("results"))
    expected = 4 * sum(w.numel() for w in weights.values())
    assert planned == disk_estimate.PlannedFile(Path("resources/models/tiny.*.partial"), expected)
    monkeypatch.setattr(disk_estimate, "free_bytes", lambda results: expected - 1)
    with pytest.raises(DiskSpaceError, match=r"tiny\.\*\.partial"):
        check_disk_space(config, families(), "results")
    build_manifest("tiny", config["models"]["tiny"])
    written = (tmp_path / "resources/models/tiny/model.safetensors").stat().st_size
    assert expected < written < expected + 10_000  # the safetensors header
    assert planned_files(config, families(), Path("results")) == []
