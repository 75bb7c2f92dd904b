"""Native graph ops with a pure-PyTorch reference for each (see `cherry.ops.extension`)."""
from cherry.ops.aggregate import csr_aggregate, edge_softmax
from cherry.ops.extension import extension_available, extension_status
from cherry.ops.sampling import sample_neighbors, slice_layer

__all__ = ["csr_aggregate", "edge_softmax", "extension_available", "extension_status", "sample_neighbors", "slice_layer"]
