// Schema of cherry::slice_layer: restrict one block to a subset of its destinations (the per-layer
// step of slice_blocks). Contract: cherry/ops/reference_sampling.py::slice_layer.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(cherry, m) {
  m.def(
      "slice_layer(Tensor indptr, Tensor indices, Tensor dst_positions, int num_parent_src) "
      "-> (Tensor, Tensor, Tensor)");
}
