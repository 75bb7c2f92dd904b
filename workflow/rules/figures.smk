# One rule draws every figure (its caption in the HTML report: its section of workflow/report/figure.rst,
# chosen by the {figure} wildcard); each is
# drawn from the table (and the memory wall's searches, the datasets' sizes) alone by `python -m cherry.report.figures NAME`, as PNG and PDF. Which figures
# exist, and which experiment feeds each, is FIGURES in common.smk.


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
    log:
        "results/logs/figures/{figure}.log",
    conda:
        CONDA_ENV
    shell:
        "python -m cherry.report.figures {wildcards.figure} --table {input.table} --png {output.png}"
        " --pdf {output.pdf} --searches {input.searches} --data-info {input.info} 2> {log}"
