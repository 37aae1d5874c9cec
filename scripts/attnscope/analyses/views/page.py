"""Self-contained HTML: the viewer (viewer.html, viewer.css, viewer.js) with one page's data
inlined, and the index of a folder of pages. No page loads anything from anywhere.

The data travel as one gzip-compressed, base64-encoded buffer of the page's arrays (each at an
8-byte-aligned offset, little-endian) and a JSON header that names them:
`arrays: [{name, dtype, shape, offset}]`. The page inflates the buffer with the browser's
DecompressionStream.
"""

from __future__ import annotations

import base64
import gzip
import html
import json
from pathlib import Path

import numpy as np

from attnscope.analyses.views.payload import Page

HERE = Path(__file__).parent
DTYPES = {"float16": "float16", "float32": "float32", "uint16": "uint16"}


def pack(arrays: dict[str, np.ndarray]) -> tuple[list[dict], bytes]:
    """Concatenate arrays at 8-byte-aligned offsets; their descriptions and the bytes."""
    described, chunks, offset = [], [], 0
    for name, array in arrays.items():
        if array.dtype.name not in DTYPES:
            raise TypeError(f"{name}: dtype {array.dtype} cannot be packed")
        data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
        described.append(
            {"name": name, "dtype": array.dtype.name, "shape": list(array.shape), "offset": offset}
        )
        padding = -len(data) % 8
        chunks += [data, b"\0" * padding]
        offset += len(data) + padding
    return described, b"".join(chunks)


def unpack(described: list[dict], data: bytes) -> dict[str, np.ndarray]:
    """The inverse of `pack`."""
    out = {}
    for entry in described:
        dtype = np.dtype(entry["dtype"]).newbyteorder("<")
        count = int(np.prod(entry["shape"]))
        flat = np.frombuffer(data, dtype=dtype, count=count, offset=entry["offset"])
        out[entry["name"]] = flat.reshape(entry["shape"])
    return out


def read_page(text: str) -> tuple[dict, dict[str, np.ndarray]]:
    """(header, arrays) of a rendered page: what the page itself decodes."""
    header = json.loads(_element(text, "attnscope-header"))
    data = gzip.decompress(base64.b64decode(_element(text, "attnscope-data")))
    return header, unpack(header["arrays"], data)


def _element(text: str, element_id: str) -> str:
    start = text.index(">", text.index(f'id="{element_id}"')) + 1
    return text[start : text.index("</script>", start)]


def script_json(value) -> str:
    """JSON safe inside a <script> element."""
    return json.dumps(value, ensure_ascii=False).replace("</", "<\\/")


def render_page(page: Page, title: str) -> str:
    """The whole HTML of one page."""
    described, data = pack(page.arrays)
    header = {**page.header, "title": title, "arrays": described}
    blob = base64.b64encode(gzip.compress(data, compresslevel=9, mtime=0)).decode("ascii")
    template = (HERE / "viewer.html").read_text()
    replacements = {
        "{{title}}": html.escape(title),
        "{{style}}": (HERE / "viewer.css").read_text(),
        "{{script}}": (HERE / "viewer.js").read_text(),
        "{{header}}": script_json(header),
        "{{blob}}": blob,
    }
    for key, value in replacements.items():
        template = template.replace(key, value)
    return template


def render_index(title: str, entries: list[dict]) -> str:
    """The index page: one row per page, {file, sequence, n, preview, bytes}."""
    rows = "\n".join(
        f'<tr><td><a href="{html.escape(e["file"])}">sequence {e["sequence"]}</a></td>'
        f"<td>{e['n']}</td><td>{e['bytes'] / 1e6:.2f} MB</td>"
        f"<td>{html.escape(e['preview'])}</td></tr>"
        for e in entries
    )
    style = (HERE / "viewer.css").read_text()
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{style}</style></head>
<body><h1>{html.escape(title)}</h1>
<p>Head, model and neuron views of every page, offline. Open a page; no network is needed.</p>
<table class="index"><thead><tr><th>page</th><th>pieces</th><th>size</th><th>text</th></tr></thead>
<tbody>
{rows}
</tbody></table></body></html>
"""
