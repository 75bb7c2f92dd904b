# One rule draws every figure, each from the table (and the memory wall's searches, the datasets'
# sizes) alone by `python -m cherry.report.figures NAME`, as PNG and PDF. Which figures exist, and
# which experiment phase feeds each, is the experiment table (cherry.bench.phases; FIGURES in
# common.smk); a figure's caption in the HTML report is workflow/report/captions/{figure}.rst.


rule draw_figure:
    input:
        unpack(report_inputs),
    output:
        png=report(
            "results/figures/{figure}.png",
            caption="../report/figure.rst",
            category="Figures",
            labels={"figure": "{figure}"},
        ),
        pdf="results/figures/{figure}.pdf",
    params:
        caption=figure_caption,
    log:
        "results/logs/figures/{figure}.log",
    conda:
        CONDA_ENV
    shell:
        "python -m cherry.report.figures {wildcards.figure} --table {input.table} --png {output.png}"
        " --pdf {output.pdf} --searches {input.searches} --data-info {input.info} 2> {log}"
