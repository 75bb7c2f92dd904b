// Schema of cherry::sample_neighbors: one layer of uniform neighbour sampling without replacement
// over a CSC graph. Contract and the counter-based random choice: cherry/ops/reference_sampling.py.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(cherry, m) {
  m.def(
      "sample_neighbors(Tensor indptr, Tensor indices, Tensor seeds, int fanout, int random_seed) "
      "-> (Tensor, Tensor, Tensor)");
}
