# One rule per figure (each with its caption in the HTML report); every figure is drawn from the
# table alone by `python -m cherry.bench.figures NAME`, as PNG and PDF.


rule draw_memory_wall:
    input:
        table="results/records/runs.csv",
    output:
        png=report(
            "results/figures/memory_wall.png",
            caption="../report/memory_wall.rst",
            category="Figures",
            labels={"figure": "Memory wall"},
        ),
        pdf="results/figures/memory_wall.pdf",
    log:
        "results/logs/figures/memory_wall.log",
    conda:
        CONDA_ENV
    shell:
        "python -m cherry.bench.figures memory_wall --table {input.table} --png {output.png} --pdf {output.pdf}"
        " 2> {log}"


rule draw_microbatch_cost:
    input:
        table="results/records/runs.csv",
    output:
        png=report(
            "results/figures/microbatch_cost.png",
            caption="../report/microbatch_cost.rst",
            category="Figures",
            labels={"figure": "Cost of micro-batching"},
        ),
        pdf="results/figures/microbatch_cost.pdf",
    log:
        "results/logs/figures/microbatch_cost.log",
    conda:
        CONDA_ENV
    shell:
        "python -m cherry.bench.figures microbatch_cost --table {input.table} --png {output.png} --pdf {output.pdf}"
        " 2> {log}"


rule draw_redundancy:
    input:
        table="results/records/runs.csv",
    output:
        png=report(
            "results/figures/redundancy.png",
            caption="../report/redundancy.rst",
            category="Figures",
            labels={"figure": "Redundancy"},
        ),
        pdf="results/figures/redundancy.pdf",
    log:
        "results/logs/figures/redundancy.log",
    conda:
        CONDA_ENV
    shell:
        "python -m cherry.bench.figures redundancy --table {input.table} --png {output.png} --pdf {output.pdf}"
        " 2> {log}"


rule draw_breakdown:
    input:
        table="results/records/runs.csv",
    output:
        png=report(
            "results/figures/breakdown.png",
            caption="../report/breakdown.rst",
            category="Figures",
            labels={"figure": "Time breakdown"},
        ),
        pdf="results/figures/breakdown.pdf",
    log:
        "results/logs/figures/breakdown.log",
    conda:
        CONDA_ENV
    shell:
        "python -m cherry.bench.figures breakdown --table {input.table} --png {output.png} --pdf {output.pdf}"
        " 2> {log}"


rule draw_convergence:
    input:
        table="results/records/runs.csv",
    output:
        png=report(
            "results/figures/convergence.png",
            caption="../report/convergence.rst",
            category="Figures",
            labels={"figure": "Convergence"},
        ),
        pdf="results/figures/convergence.pdf",
    log:
        "results/logs/figures/convergence.log",
    conda:
        CONDA_ENV
    shell:
        "python -m cherry.bench.figures convergence --table {input.table} --png {output.png} --pdf {output.pdf}"
        " 2> {log}"


rule draw_sensitivity:
    input:
        table="results/records/runs.csv",
    output:
        png=report(
            "results/figures/sensitivity.png",
            caption="../report/sensitivity.rst",
            category="Figures",
            labels={"figure": "Sensitivity"},
        ),
        pdf="results/figures/sensitivity.pdf",
    log:
        "results/logs/figures/sensitivity.log",
    conda:
        CONDA_ENV
    shell:
        "python -m cherry.bench.figures sensitivity --table {input.table} --png {output.png} --pdf {output.pdf}"
        " 2> {log}"


rule draw_ablation:
    input:
        table="results/records/runs.csv",
    output:
        png=report(
            "results/figures/ablation.png",
            caption="../report/ablation.rst",
            category="Figures",
            labels={"figure": "Ablation"},
        ),
        pdf="results/figures/ablation.pdf",
    log:
        "results/logs/figures/ablation.log",
    conda:
        CONDA_ENV
    shell:
        "python -m cherry.bench.figures ablation --table {input.table} --png {output.png} --pdf {output.pdf}"
        " 2> {log}"


rule draw_estimator:
    input:
        table="results/records/runs.csv",
    output:
        png=report(
            "results/figures/estimator.png",
            caption="../report/estimator.rst",
            category="Figures",
            labels={"figure": "Memory estimator"},
        ),
        pdf="results/figures/estimator.pdf",
    log:
        "results/logs/figures/estimator.log",
    conda:
        CONDA_ENV
    shell:
        "python -m cherry.bench.figures estimator --table {input.table} --png {output.png} --pdf {output.pdf}"
        " 2> {log}"
