"""Native graph ops with a pure-PyTorch reference for each (see `cherry.ops.extension`)."""
from cherry.ops.aggregate import csr_aggregate, edge_softmax
from cherry.ops.extension import extension_available, extension_status

__all__ = ["csr_aggregate", "edge_softmax", "extension_available", "extension_status"]
