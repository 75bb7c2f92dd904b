"""``naive``: split the seeds at random into K groups and sample each group on its own (by hand)."""
from baselines.naive.system import NaiveSystem

SYSTEM = NaiveSystem

__all__ = ["SYSTEM", "NaiveSystem"]
