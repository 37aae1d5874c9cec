"""examples/quickstart.ipynb executed offline by nbclient, and its inline view opened in
headless Chromium (the iframe the notebook shows, with the page inside it)."""

from __future__ import annotations

import html
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    notebook = nbformat.read(ROOT / "examples/quickstart.ipynb", as_version=4)
    folder = tmp_path_factory.mktemp("notebook")
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={
        "metadata": {"path": str(folder)}
    }).execute()  # fmt: skip
    return notebook


def outputs(notebook, kind: str) -> list:
    return [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs if kind in o]


def test_quickstart_runs_and_shows_its_results(executed):
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in errors if o.output_type == "error"]
    printed = "".join(o.get("text", "") for o in errors if o.output_type == "stream")
    residual = float(re.search(r"largest relative residual: (\S+)", printed).group(1))
    assert residual < 1e-4
    pngs = [o for o in outputs(executed, "data") if "image/png" in o["data"]]
    assert len(pngs) == 1  # the mixing map
    tables = [o for o in outputs(executed, "data") if "<table" in o["data"].get("text/html", "")]
    assert tables  # the layers' head statistics


def test_quickstart_view_opens_inline_in_a_browser(executed, browser, tmp_path):
    frames = [
        o["data"]["text/html"]
        for o in outputs(executed, "data")
        if "<iframe" in o["data"].get("text/html", "")
    ]
    assert len(frames) == 1
    path = tmp_path / "output.html"
    path.write_text(f"<!DOCTYPE html><html><body>{frames[0]}</body></html>", encoding="utf-8")
    context = browser.new_context()
    requests, errors = [], []
    context.route("**/*", lambda route: (requests.append(route.request.url), route.continue_()))
    page = context.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    frame = page.frame_locator("iframe")
    frame.locator("body[data-ready='1']").wait_for(timeout=20000)
    lines = int(frame.locator("#head-svg").get_attribute("data-lines"))
    assert lines > 0
    assert "The cat sat on the mat." in html.unescape(frames[0])
    assert errors == [] and requests == [path.as_uri()]
    context.close()
