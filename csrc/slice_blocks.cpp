// Schemas of cherry::slice_layer (restrict one block to a subset of its destinations, the per-layer
// step of slice_blocks) and cherry::slice_layer_many (the same for K groups of destinations in one
// call, outputs concatenated group after group, with the sources' global ids gathered too; the group
// and output offsets are host integer lists, which the caller needs anyway to cut the outputs).
// Contracts: cherry/ops/reference_sampling.py.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(cherry, m) {
  m.def(
      "slice_layer(Tensor indptr, Tensor indices, Tensor dst_positions, int num_parent_src) "
      "-> (Tensor, Tensor, Tensor)");
  m.def(
      "slice_layer_many(Tensor indptr, Tensor indices, Tensor dst_positions, int[] group_offsets, "
      "Tensor parent_src_nodes) -> (Tensor, Tensor, Tensor, Tensor, int[], int[])");
}
