"""Native graph ops with a pure-PyTorch reference for each (see `cherry.ops.extension`)."""
from cherry.ops.aggregate import aggregate_block, csr_aggregate, edge_softmax, edge_softmax_block, segment_reduce
from cherry.ops.attention import attention_aggregate, attention_aggregate_block
from cherry.ops.dropout import node_dropout
from cherry.ops.extension import extension_available, extension_status
from cherry.ops.sampling import sample_neighbors, slice_layer

__all__ = ["aggregate_block", "attention_aggregate", "attention_aggregate_block", "csr_aggregate", "edge_softmax",
           "edge_softmax_block", "extension_available", "extension_status", "node_dropout", "sample_neighbors",
           "segment_reduce", "slice_layer"]
