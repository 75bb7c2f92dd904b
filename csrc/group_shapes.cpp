// Schemas of cherry::group_shapes (per-group source/destination/edge counts of every layer of one
// labelling's micro-batches, without slicing) and cherry::group_shapes_many (the same for every row of
// a [C, n] labelling, in one walk). Kernels: cpu/group_shapes.cpp, cuda/grow_groups.cu. Contract:
// cherry/ops/reference_planning.py.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(cherry, m) {
  m.def("group_shapes(Tensor[] indptrs, Tensor[] indices, Tensor positions, Tensor groups, int num_groups) -> Tensor");
  m.def("group_shapes_many(Tensor[] indptrs, Tensor[] indices, Tensor positions, Tensor groups, int num_groups, "
        "int num_inputs) -> Tensor");
}
