# Figures, drawn from tables only: one rule per scope draws every declared figure of that
# scope (analyses/<family>/outputs.py) with analyses/<family>/plots.py. The report caption
# is report/<family>/<figure>.rst, passed through report/figure.rst.


rule figure_corpus:
    input:
        unpack(figure_tables),
    output:
        svg=report(
            "results/{model}/{corpus}/{family}/figures/{figure}.svg",
            caption="../report/figure.rst",
            category=figure_category,
            subcategory="{model} / {corpus}",
        ),
        png="results/{model}/{corpus}/{family}/figures/{figure}.png",
    log:
        "results/{model}/{corpus}/logs/figure_{family}_{figure}.log",
    wildcard_constraints:
        figure=figure_names("corpus"),
    conda:
        "../envs/plots.yaml"
    params:
        figure=figure_params,
    script:
        "../scripts/draw_figure.py"


rule figure_model:
    input:
        unpack(figure_tables),
    output:
        svg=report(
            "results/{model}/model/figures/{figure}.svg",
            caption="../report/figure.rst",
            category=figure_category,
            subcategory="{model} / model",
        ),
        png="results/{model}/model/figures/{figure}.png",
    log:
        "results/{model}/logs/figure_{figure}.log",
    wildcard_constraints:
        figure=figure_names("model"),
    conda:
        "../envs/plots.yaml"
    params:
        figure=figure_params,
    script:
        "../scripts/draw_figure.py"


rule figure_all_models:
    input:
        unpack(figure_tables),
    output:
        svg=report(
            "results/{family}_{figure}.svg",
            caption="../report/figure.rst",
            category=figure_category,
            subcategory="all models",
        ),
        png="results/{family}_{figure}.png",
    log:
        "results/logs/figure_{family}_{figure}.log",
    wildcard_constraints:
        figure=figure_names("all"),
    conda:
        "../envs/plots.yaml"
    params:
        figure=figure_params,
    script:
        "../scripts/draw_figure.py"
