// Schema of cherry::tree_costs (each seed's cost under the memory model, counted over its whole
// sampled tree with multiplicity). Kernels: cpu/tree_costs.cpp, cuda/tree_costs.cu. Contract:
// cherry/ops/reference_planning.py.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(cherry, m) {
  m.def("tree_costs(Tensor[] indptrs, Tensor[] indices, float[] per_dst, float[] per_edge) -> Tensor");
}
