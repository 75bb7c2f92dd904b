// Schemas of cherry::grow_groups (greedy growing of micro-batch groups over the top layer's shared
// neighbours) and cherry::group_shapes (per-group source/destination/edge counts of every layer,
// without slicing). Kernels: cpu/grow_groups.cpp, cuda/grow_groups.cu. Contract:
// cherry/ops/reference_planning.py.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(cherry, m) {
  m.def("grow_groups(Tensor indptr, Tensor indices, Tensor order, Tensor weights, int num_groups) -> Tensor");
  m.def("group_shapes(Tensor[] indptrs, Tensor[] indices, Tensor positions, Tensor groups, int num_groups) -> Tensor");
}
