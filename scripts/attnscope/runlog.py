"""Send a rule script's output to the rule's log file."""

from __future__ import annotations

import logging
import sys


def start(snakemake) -> logging.Logger:
    """Redirect stdout/stderr of a `script:` job to its `log:` file; return a logger."""
    if snakemake.log:
        stream = open(snakemake.log[0], "w", buffering=1)
        sys.stdout = sys.stderr = stream
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        force=True,
    )
    return logging.getLogger(snakemake.rule)
