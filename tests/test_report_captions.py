"""Every report caption is valid reStructuredText: docutils renders it without a message.

An undefined substitution such as `|alpha|` or `<|endoftext|>` would otherwise put docutils'
error text into report.html.
"""

import io
import re
from pathlib import Path

import pytest
from docutils.core import publish_doctree

ROOT = Path(__file__).resolve().parents[1]
CAPTIONS = sorted((ROOT / "report").rglob("*.rst"))


def test_there_are_captions():
    assert len(CAPTIONS) > 5


@pytest.mark.parametrize("caption", CAPTIONS, ids=lambda p: str(p.relative_to(ROOT / "report")))
def test_caption_renders_without_docutils_messages(caption):
    messages = io.StringIO()
    publish_doctree(
        caption.read_text(),
        settings_overrides={"warning_stream": messages, "report_level": 1, "halt_level": 5},
    )
    assert messages.getvalue() == "", f"{caption}: {messages.getvalue()}"


def test_make_report_passes_snakemake_args_and_mirror():
    """`make report` after a custom config must build from that config, not the default."""
    makefile = (ROOT / "Makefile").read_text()
    report_recipe = re.search(r"^report:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert "$(SNAKEMAKE_ARGS)" in report_recipe
    assert "$(MIRROR_CONFIG)" in report_recipe
