"""``betty``: Betty (ASPLOS'23) REG partitioning of the output layer, reimplemented (see `reg`)."""
from baselines.betty.system import BettySystem

SYSTEM = BettySystem

__all__ = ["SYSTEM", "BettySystem"]
