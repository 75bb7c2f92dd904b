"""Benchmarking: running, measuring and recording (reporting is `cherry.report`).

- `cherry.bench.runner` / `cherry.bench.run`: ``python -m cherry.bench.run --spec SPEC.json --out
  RECORD.json`` (one run, one process, one record).
- `cherry.bench.measure`: `TimingProbe` (phase times), `RunPeakMemory`, `summarize`.
- `cherry.bench.record`: `build_record`, `validate_record`, `write_record` (schema: record.schema.yaml).
- `cherry.bench.aggregate`: ``collect_records`` and the CSV/Parquet CLI.
- `cherry.bench.experiments`: the workflow config expanded into run specs.
- `cherry.bench.verify_record`: the record `cherry verify --json` writes (schema: verify.schema.yaml).

The run spec is `cherry.spec`; the systems table and the `System` contract are `cherry.systems`
(Cherry's adapter is `cherry.execution.cherry_system`); the side-by-side benchmarks behind
``cherry bench`` are the top-level `benchmarks`.
Nothing is imported here.
"""
