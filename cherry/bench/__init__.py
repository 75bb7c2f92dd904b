"""Benchmarking: running, measuring and recording (reporting is `cherry.report`).

- `cherry.bench.runner` / `cherry.bench.run`: ``python -m cherry.bench.run --spec SPEC.json --out
  RECORD.json`` (one run, one process, one record).
- `cherry.bench.measure`: `TimingProbe` (phase times), `RunPeakMemory`, `summarize`.
- `cherry.bench.record`: `build_record`, `validate_record`, `write_record` (schema: record.schema.yaml).
- `cherry.bench.aggregate`: ``collect_records`` and the CSV/Parquet CLI.
- `cherry.bench.experiments`: the workflow config expanded into run specs.

The run spec is `cherry.spec`; the systems table, the `System` contract and Cherry's adapter are
`cherry.systems`; the side-by-side benchmarks behind ``cherry bench`` are the top-level `benchmarks`.
Nothing is imported here.
"""
