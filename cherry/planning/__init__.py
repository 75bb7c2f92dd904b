"""Planning: memory model, seed orderings, splits and the `MicrobatchPlan`."""
