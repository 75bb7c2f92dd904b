// Schema of cherry::grow_groups (greedy growing of micro-batch groups over the top layer's shared
// neighbours). Kernels: cpu/grow_groups.cpp, cuda/grow_groups.cu. Contract:
// cherry/ops/reference_planning.py.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(cherry, m) {
  m.def("grow_groups(Tensor indptr, Tensor indices, Tensor order, Tensor weights, int num_groups) -> Tensor");
}
