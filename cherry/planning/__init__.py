"""Planning: memory model, seed orderings, splits and the `MicrobatchPlan`."""
from cherry.planning.memory_model import LayerCost, MemoryModel, layer_costs
from cherry.planning.ordering import ORDERINGS, locality_rank, seed_rank
from cherry.planning.plan import BudgetTooSmallError, MicrobatchPlan, plan_microbatches
from cherry.planning.shapes import BatchShape, LayerShape
from cherry.planning.split import BALANCES, seed_costs, split_seeds

__all__ = [
    "BALANCES", "BatchShape", "BudgetTooSmallError", "LayerCost", "LayerShape", "MemoryModel",
    "MicrobatchPlan", "ORDERINGS", "layer_costs", "locality_rank", "plan_microbatches", "seed_costs", "seed_rank",
    "split_seeds",
]
