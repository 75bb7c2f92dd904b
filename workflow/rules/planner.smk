# Input redundancy and planning time of every planner per degree law: `cherry bench planner`
# on the graphs of config["planner"] (degree laws generated in memory, datasets from the data
# directory), then the figure drawn from its JSON alone. Without `planner:` in the config neither runs.


rule bench_planner:
    input:
        data=planner_data_inputs,
    output:
        json="results/planner/planner.json",
    log:
        "results/logs/planner/bench.log",
    params:
        args=planner_arguments,
    threads: THREADS
    conda:
        CONDA_ENV
    shell:
        "python -m cherry bench planner {params.args} --json {output.json} > {log} 2>&1"


rule draw_planner_figure:
    input:
        json="results/planner/planner.json",
    output:
        png=report(
            "results/figures/planner_redundancy.png",
            caption="../report/planner.rst",
            category="Figures",
            labels={"figure": "planner_redundancy"},
        ),
        pdf="results/figures/planner_redundancy.pdf",
    log:
        "results/logs/figures/planner_redundancy.log",
    conda:
        CONDA_ENV
    shell:
        "python -m cherry.report.planner_figure {input.json} --png {output.png} --pdf {output.pdf} 2> {log}"
