"""Cherry: exact micro-batched GNN training under a device-memory budget."""
__version__ = "0.1.0"
