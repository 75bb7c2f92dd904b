"""``full``: the plain mini-batch, one forward/backward and one optimizer step (the memory-wall reference)."""
from baselines.full.system import FullBatchSystem

SYSTEM = FullBatchSystem

__all__ = ["SYSTEM", "FullBatchSystem"]
