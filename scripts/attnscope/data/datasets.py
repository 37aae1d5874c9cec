"""The public data files the corpora are built from: pinned upstream address and SHA-256.

Which kind reads which files: `attnscope.data.corpora.KINDS`.

Acquisition copies a file from a mirror folder (laid out like `relpath`) or downloads it from
`url`, verifies the SHA-256, and only then moves it into place.
"""

from __future__ import annotations

import shutil
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from attnscope.core.files import atomic_path, sha256_of

RAW = "https://raw.githubusercontent.com"
UD_EWT = f"{RAW}/UniversalDependencies/UD_English-EWT/r2.16"
GAP = f"{RAW}/google-research-datasets/gap-coreference/83135f26025cdd705c04f77e940d0c9201116b80"
WIKITEXT = (
    f"{RAW}/pytorch/examples/77f55b912142e11fcfdf5b530231fb9c52f181e8"
    "/word_language_model/data/wikitext-2"
)


@dataclass(frozen=True)
class DataFile:
    relpath: str  # path under the mirror folder and under resources/data/
    url: str
    sha256: str
    licence: str


DATA_FILES = {
    f.relpath: f
    for f in [
        DataFile(
            "ud-english-ewt-r2.16/en_ewt-ud-dev.conllu",
            f"{UD_EWT}/en_ewt-ud-dev.conllu",
            "531a54ff90d6ab12201c5a50c3e78e6ddac4de69abc4bce5d275d3cd29efe2b6",
            "CC BY-SA 4.0",
        ),
        DataFile(
            "ud-english-ewt-r2.16/en_ewt-ud-test.conllu",
            f"{UD_EWT}/en_ewt-ud-test.conllu",
            "e266e515a0a7547657ed3d90d9ba46487d6bd251f27ad4269d4e8a427c8555cd",
            "CC BY-SA 4.0",
        ),
        DataFile(
            "gap-coreference/gap-development.tsv",
            f"{GAP}/gap-development.tsv",
            "b9a01434fcf58d8c2f9bc762480c27e58ce466cf1ffe8b09cfecbc7a20d2d634",
            "Apache-2.0",
        ),
        DataFile(
            "gap-coreference/gap-test.tsv",
            f"{GAP}/gap-test.tsv",
            "1c35e36d5b14f6313ec3f6cd67b275de282595dd59e59390e00cfff9897a6819",
            "Apache-2.0",
        ),
        DataFile(
            "gap-coreference/gap-validation.tsv",
            f"{GAP}/gap-validation.tsv",
            "2d784f66b390404f554704b9aef6dcde8845e79dda9886b8391cf7e9a24fdb98",
            "Apache-2.0",
        ),
        DataFile(
            "wikitext-2/valid.txt",
            f"{WIKITEXT}/valid.txt",
            "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
            "CC BY-SA 3.0 (Merity et al. 2017)",
        ),
        DataFile(
            "wikitext-2/test.txt",
            f"{WIKITEXT}/test.txt",
            "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
            "CC BY-SA 3.0 (Merity et al. 2017)",
        ),
    ]
}


class ChecksumError(RuntimeError):
    """A data file's SHA-256 differs from the pinned one."""


def acquire(relpath: str, destination: str | Path, mirror: str = "") -> str:
    """Fetch one data file into `destination`, verified; returns where it came from.

    With a mirror folder the file must be there (no silent fall-back to the network);
    without one it is downloaded from the pinned upstream address. Nothing is left under
    `destination` unless the SHA-256 matches.
    """
    entry = DATA_FILES[relpath]
    with atomic_path(destination) as partial:
        if mirror:
            origin = Path(mirror) / relpath
            if not origin.is_file():
                raise FileNotFoundError(
                    f"mirror folder {mirror} has no {relpath} (expected at {origin})"
                )
            shutil.copyfile(origin, partial)
        else:
            origin = entry.url
            with (
                urllib.request.urlopen(entry.url, timeout=60) as response,
                open(partial, "wb") as out,
            ):
                shutil.copyfileobj(response, out)
        actual = sha256_of(partial)
        if actual != entry.sha256:
            raise ChecksumError(
                f"{relpath} from {origin}: SHA-256 is {actual}, expected {entry.sha256}; "
                "the file is corrupt or not the pinned release"
            )
    return str(origin)
