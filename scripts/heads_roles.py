"""Head roles of one model: the role scores of the repeated corpus joined with the tables the
other families made (those the run makes: the rest are not judged), circuits.tsv from the
attend family's groups.tsv, and the atlas page."""

import json

import pandas as pd

from attnscope.analyses.heads.atlas import atlas_data, render
from attnscope.analyses.heads.circuits import circuits
from attnscope.analyses.heads.roles import head_roles
from attnscope.analyses.heads.settings import RolesSettings
from attnscope.core.files import write_table, write_text
from attnscope.core.tables import is_not_applicable, not_applicable
from attnscope.pipeline.job import Job

job = Job(snakemake)
log, settings, output = job.log, job.settings(RolesSettings, besides=("links",)), job.output


def read(name):
    path = job.input.get(name)
    return None if path is None else pd.read_csv(path, sep="\t")


names = [name for name in job.input.keys() if name not in ("patterns", "in_context_loss")]
tables = {name: read(name) for name in names}
scores = tables["role_scores"]
layers = sorted(int(layer) for layer in scores.loc[scores["induction"].notna(), "layer"].unique())
roles, rules = head_roles(layers, int(scores["head"].max()), tables, settings.thresholds)
write_table(roles, output.head_roles)
write_table(rules, output.role_rules)
groups = tables.get("attend_groups")
if groups is None:
    found = not_applicable("no groups.tsv of the attend family for this model's tables_corpus")
elif is_not_applicable(groups):
    found = groups
else:
    found = circuits(roles, groups, settings.min_share)
write_table(found, output.circuits)
patterns = json.loads(open(job.input.patterns, encoding="utf-8").read())
loss = read("in_context_loss")
edges = None if is_not_applicable(found) else found
grouped = None if edges is None else groups
data = atlas_data(
    job.wildcards.model, roles, rules, edges, patterns, loss, job.params.links, grouped
)
write_text(render(data, f"Head roles: {job.wildcards.model}"), output.atlas)
log.info("wrote the head roles and atlas of %s", job.wildcards.model)
