# Figures, drawn from tables only: one rule per declared figure, named
# <family>_figure_<figure> (norms_figure_alpha_fx_scatter), made from the declarations in
# analyses/<family>/outputs.py. Each draws with the function of the same name in
# analyses/<family>/plots.py; its report caption is report/<family>/<figure>.rst.

for family in FAMILIES.values():
    for figure in family.figures:

        rule:
            name:
                f"{family.name}_figure_{figure.name}"
            input:
                **figure_tables(family, figure),
            output:
                svg=report(
                    figure_paths(family, figure)[0],
                    caption=f"../report/{family.name}/{figure.name}.rst",
                    category=family.title,
                    subcategory=FIGURE_SUBCATEGORIES[figure.scope],
                ),
                png=figure_paths(family, figure)[1],
            log:
                figure_log(family, figure),
            conda:
                "../envs/plots.yaml"
            resources:
                runtime=10,
                mem_mb=2000,
            params:
                family=family.name,
                figure=figure.name,
                settings=figure_settings(family, figure),
            script:
                "../scripts/draw_figure.py"
