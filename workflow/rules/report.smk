# The headline summary (Markdown) and the HTML report. The report is not a rule: Snakemake builds it
# from the finished workflow with
#   snakemake --report results/report.html
# (figures with their captions from workflow/report/, the summary, and every job's provenance).


report: "../report/workflow.rst"


rule write_summary:
    input:
        unpack(report_inputs),
        checks=verify_paths(),
    output:
        summary=report("results/summary.md", caption="../report/summary.rst", category="Summary"),
        ratios="results/summary.json",
    log:
        "results/logs/write_summary.log",
    conda:
        CONDA_ENV
    shell:
        "python -m cherry.report.summary --table {input.table} --out {output.summary} --json {output.ratios}"
        " --searches {input.searches} --data-info {input.info} -- {input.checks} 2> {log}"
