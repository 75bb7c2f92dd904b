"""``buffalo``: Buffalo (HPCA'25) degree-bucket + knapsack scheduling, reimplemented (see `buckets`)."""
from baselines.buffalo.system import BuffaloSystem

SYSTEM = BuffaloSystem

__all__ = ["SYSTEM", "BuffaloSystem"]
