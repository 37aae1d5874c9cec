"""Self-contained HTML views (head, model, neuron) of chosen sequences of one corpus."""

from attnscope.analyses.views.page import render_index, render_page
from attnscope.analyses.views.payload import sequence_page
from attnscope.analyses.views.settings import ViewsSettings
from attnscope.core.files import atomic_folder
from attnscope.core.store import HiddenStates
from attnscope.pipeline.job import Job

job = Job(snakemake)
log, settings = job.log, job.settings(ViewsSettings)
model_name, corpus = job.wildcards.model, job.wildcards.corpus
loaded = job.model(with_head=settings.scopes)  # the prediction row comes with the scopes
tokenizer = job.tokenizer()
prediction = loaded.prediction(tokenizer, settings.contrast)
with (
    HiddenStates(job.input.hidden_states) as store,
    atomic_folder(job.output[0]) as out,
):
    chosen = settings.sequences
    if chosen is None:
        chosen = list(range(min(settings.max_pages, store.n_sequences)))
    missing = [i for i in chosen if i >= store.n_sequences]
    if missing:
        raise ValueError(
            f"config: analyses.views.sequences.{corpus} names sequences {missing}, but corpus "
            f"{corpus!r} has {store.n_sequences} (0-based: 0..{store.n_sequences - 1})"
        )
    entries = []
    for index in chosen:
        page = sequence_page(store, index, loaded, tokenizer, settings, log, prediction)
        file = f"sequence_{index:04d}.html"
        text = render_page(page, f"{model_name} / {corpus} / sequence {index}")
        (out / file).write_text(text, encoding="utf-8")
        preview = " ".join(page.header["unit_labels"][:16])
        entries.append(
            {
                "file": file,
                "sequence": index,
                "n": page.header["n"],
                "preview": preview,
                "bytes": len(text.encode()),
            }  # fmt: skip
        )
        log.info("%s: %d pieces, %.2f MB", file, page.header["n"], entries[-1]["bytes"] / 1e6)
    index_html = render_index(f"attnscope views: {model_name} / {corpus}", entries)
    (out / "index.html").write_text(index_html, encoding="utf-8")
log.info("wrote %d pages to %s", len(entries), job.output[0])
