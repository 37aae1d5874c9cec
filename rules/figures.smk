# Figures, drawn from tables only: one rule per group of declared figures that every run
# wants together (`FigureGroup`, analyses/family.py), named <family>_figures[_<part>...]
# (norms_figures: the corpus figures of norms). Each figure is drawn by the function of the
# same name in analyses/<family>/plots.py; its report caption is report/<family>/<figure>.rst.

for family in FAMILIES.values():
    for group in family.figure_groups():

        rule:
            name:
                group.name
            input:
                **group_tables(family, group),
            output:
                **group_figures(family, group),
            log:
                figure_log(family, group),
            conda:
                "../envs/plots.yaml"
            resources:
                runtime=10,
                mem_mb=2000,
            params:
                family=family.name,
                figures=group_settings(family, group),
            script:
                "../scripts/draw_figures.py"
