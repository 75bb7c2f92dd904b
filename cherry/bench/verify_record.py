"""The record of one gradient-equivalence check (`cherry verify --json FILE`), as the workflow's summary
reads it: ``workflow/schemas/verify.schema.yaml``.

`VerifyRecord.from_differences` builds it from the per-parameter differences `cherry.execution.verify`
and `cherry.execution.distributed_check` compute; `write_verify_record` validates and writes it
atomically; `read_verify_record` reads and validates one (ValueError, one line naming the file).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Optional

from cherry.schemas import schema_problem

WHAT = "verify record"


@dataclass(frozen=True)
class ParameterEntry:
    name: str
    max_abs_diff: float
    max_rel_diff: float  # max |g_K - g_1| / max |g_1|


@dataclass(frozen=True)
class VerifyRecord:
    """One check: K (the largest per rank when ``nproc > 1``) against K = 1 on ``num_seeds`` seeds.
    ``within`` is ``max_rel_diff <= tolerance``; ``parameters_identical`` is None for one process."""

    num_microbatches: int
    rank_microbatches: Optional[tuple[int, ...]]
    nproc: int
    num_seeds: int
    max_rel_diff: float
    max_abs_diff: float
    tolerance: float
    within: bool
    parameters_identical: Optional[bool]
    parameters: tuple[ParameterEntry, ...]

    @property
    def passed(self) -> bool:
        """The check's verdict (`cherry verify` exits 0 exactly then)."""
        return self.within and self.parameters_identical is not False

    @staticmethod
    def from_differences(differences: Iterable[Any], num_microbatches: int, num_seeds: int, tolerance: float,
                         rank_microbatches: Optional[Iterable[int]] = None,
                         parameters_identical: Optional[bool] = None) -> "VerifyRecord":
        """From objects with ``name``, ``max_abs_diff`` and ``max_rel_diff`` (one per parameter)."""
        params = tuple(ParameterEntry(str(d.name), float(d.max_abs_diff), float(d.max_rel_diff)) for d in differences)
        ranks = None if rank_microbatches is None else tuple(int(k) for k in rank_microbatches)
        worst = max((p.max_rel_diff for p in params), default=0.0)
        return VerifyRecord(num_microbatches=int(num_microbatches), rank_microbatches=ranks,
                            nproc=len(ranks) if ranks else 1, num_seeds=int(num_seeds), max_rel_diff=worst,
                            max_abs_diff=max((p.max_abs_diff for p in params), default=0.0),
                            tolerance=float(tolerance), within=worst <= tolerance,
                            parameters_identical=parameters_identical, parameters=params)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["rank_microbatches"] = None if self.rank_microbatches is None else list(self.rank_microbatches)
        out["parameters"] = [asdict(p) for p in self.parameters]
        return out


def write_verify_record(record: VerifyRecord, path: str) -> None:
    """Validate ``record`` against the schema and write it to ``path`` atomically."""
    from cherry.io import write_json_atomic

    data = record.as_dict()
    problem = schema_problem(data, "verify", WHAT)
    if problem is not None:
        raise ValueError(problem)
    write_json_atomic(path, data)


def read_verify_record(path: str) -> VerifyRecord:
    """The record at ``path`` (ValueError, one line naming the file, if unreadable or off the schema)."""
    from cherry.io import read_json

    data = read_json(path, WHAT)
    problem = schema_problem(data, "verify", WHAT)
    if problem is not None:
        raise ValueError(f"{str(path)!r}: {problem}")
    ranks = data["rank_microbatches"]
    return VerifyRecord(**{**data, "rank_microbatches": None if ranks is None else tuple(ranks),
                           "parameters": tuple(ParameterEntry(**p) for p in data["parameters"])})
