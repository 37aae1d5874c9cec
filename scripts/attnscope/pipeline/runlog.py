"""Set up a rule script's process: output to the rule's log file, torch kept to the rule's
threads, freed memory kept for the next batch."""

from __future__ import annotations

import logging
import os
import sys

from attnscope.model.allocator import keep_freed_memory


def _report_to_console(rule: str, log_path: str, console):
    """An excepthook: the traceback goes to the log, the error itself to the console too,
    so a failed job says why where the user looks (Snakemake prints only `message: None`)."""

    def hook(kind, error, trace):
        sys.__excepthook__(kind, error, trace)
        console.write(
            f"Error in rule {rule}: {kind.__name__}: {error}\n(traceback in {log_path})\n"
        )
        console.flush()

    return hook


def start(snakemake) -> logging.Logger:
    """Redirect stdout/stderr of a `script:` job to its `log:` file; return a logger.

    Torch (imported now or later) uses `snakemake.threads` threads, so parallel jobs never
    ask for more cores than Snakemake gave them; freed memory is kept (`keep_freed_memory`).
    """
    if snakemake.log:
        stream = open(snakemake.log[0], "w", buffering=1)
        sys.stdout = sys.stderr = stream
        sys.excepthook = _report_to_console(snakemake.rule, snakemake.log[0], sys.__stderr__)
    keep_freed_memory()
    threads = str(max(1, int(getattr(snakemake, "threads", 1))))
    os.environ["OMP_NUM_THREADS"] = threads
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(threads))
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        force=True,
    )
    return logging.getLogger(snakemake.rule)
