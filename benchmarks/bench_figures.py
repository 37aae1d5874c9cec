"""Figure jobs: one process per figure against one process per group of figures.

Each process runs `scripts/draw_figures.py` as a Snakemake job does (Python starts, imports
pandas, matplotlib and seaborn, reads the tables, draws, saves SVG and PNG), from the tables of
a finished run, into a temp folder. Routes, over the same figures:

  figure  one process per figure: the rules `<family>_figure_<figure>` before commit c7e1c45
  group   one process per `FigureGroup`: the rules `<family>_figures...` since

The routes alternate within each round (their order rotates from round to round). Printed:
each route's seconds per round (all its processes, one after the other) and figure / group.
Figures over all models (`position_figures_all`) are left out: they read every model's tables.

Run: .venv/bin/python benchmarks/bench_figures.py RESULTS [--model minilm-l6] [--repeats 3]
     (RESULTS: a finished run's results folder, e.g. the default run's)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

# What a rule job's script gets from Snakemake: input, output, params (and a log).
RUNNER = """
import json, runpy, sys
from types import SimpleNamespace
from snakemake.iocontainers import Namedlist

script, inputs, outputs, params = json.loads(sys.argv[1])
snakemake = SimpleNamespace(
    input=Namedlist(fromdict=inputs), output=Namedlist(fromdict=outputs),
    params=SimpleNamespace(**params), wildcards=Namedlist(fromdict={}), config={}, log=[],
    rule="bench_figures",
)
runpy.run_path(script, init_globals={"snakemake": snakemake})
"""


def group_jobs(results: Path, model: str, config: dict, out: Path) -> list[dict]:
    """One job per figure group and folder of `model` whose tables the run made: {family,
    figures: {figure: {tables, settings}}, inputs, outputs}."""
    from attnscope.analyses.family import families

    jobs = []
    for family in families().values():
        own = config["analyses"][family.name]
        for group in family.figure_groups():
            if group.scope == "all":
                continue
            folders = (
                [results / model / "model"]
                if group.scope == "model"
                else sorted(p for p in (results / model).glob(f"*/{family.name}") if p.is_dir())
            )
            for folder in folders:
                files = {f for figure in group.figures for f in figure.tables}
                if not all((folder / f).is_file() for f in files):
                    continue
                target = out / f"{folder.parent.name}_{group.name}"
                job = {"family": family.name, "figures": {}, "inputs": {}, "outputs": {}}
                for figure in group.figures:
                    stems = [f.split(".")[0] for f in figure.tables]
                    settings = {key: own[key] for key in figure.settings} | {"title": model}
                    job["figures"][figure.name] = {"tables": stems, "settings": settings}
                    job["inputs"] |= {f.split(".")[0]: str(folder / f) for f in figure.tables}
                    for suffix in ("svg", "png"):
                        job["outputs"][f"{figure.name}_{suffix}"] = str(
                            target / f"{figure.name}.{suffix}"
                        )
                jobs.append(job)
    return jobs


def figure_jobs(jobs: list[dict]) -> list[dict]:
    """The same figures, one job each."""
    single = []
    for job in jobs:
        for name, declared in job["figures"].items():
            single.append(
                {
                    "family": job["family"],
                    "figures": {name: declared},
                    "inputs": {stem: job["inputs"][stem] for stem in declared["tables"]},
                    "outputs": {k: v for k, v in job["outputs"].items() if k.startswith(name)},
                }
            )
    return single


def run_all(jobs: list[dict]) -> float:
    """Seconds to run every job in its own process, one after the other."""
    script = str(ROOT / "scripts" / "draw_figures.py")
    start = time.perf_counter()
    for job in jobs:
        params = {"family": job["family"], "figures": job["figures"]}
        argument = json.dumps([script, job["inputs"], job["outputs"], params])
        done = subprocess.run([sys.executable, "-c", RUNNER, argument], capture_output=True)
        if done.returncode != 0:
            raise SystemExit(done.stderr.decode()[-2000:])
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    records = sorted((args.results / "software" / "configs").glob("*.yaml"))
    if not records:
        raise SystemExit(f"no configuration record in {args.results}/software/configs")
    config = yaml.safe_load(records[-1].read_text())
    with tempfile.TemporaryDirectory() as tmp:
        groups = group_jobs(args.results, args.model, config, Path(tmp))
        routes = {"group": groups, "figure": figure_jobs(groups)}
        print(f"{args.model}: {len(routes['figure'])} figures in {len(groups)} group jobs")
        seconds = {route: [] for route in routes}
        for round_ in range(args.repeats):
            order = list(routes)[round_ % 2 :] + list(routes)[: round_ % 2]
            for route in order:
                seconds[route].append(run_all(routes[route]))
            ratio = seconds["figure"][-1] / seconds["group"][-1]
            print(
                f"round {round_ + 1}: figure {seconds['figure'][-1]:.1f} s, "
                f"group {seconds['group'][-1]:.1f} s, figure / group {ratio:.2f}"
            )
    ratios = [f / g for f, g in zip(seconds["figure"], seconds["group"], strict=True)]
    print(
        f"median: figure {statistics.median(seconds['figure']):.1f} s, "
        f"group {statistics.median(seconds['group']):.1f} s, "
        f"figure / group {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
    )


if __name__ == "__main__":
    main()
