// Schema of cherry::node_dropout, exact dropout without a stored mask (kernels: cpu/node_dropout.cpp,
// cuda/node_dropout.cu; argument checks and the keep rule: node_dropout.h; reference and contract:
// cherry/ops/reference_dropout.py).
//
// node_dropout(x [R, F], states [R] int64, threshold, scale) -> out [R, F]:
//   out[r, j] = (x[r, j] * keep) * scale with keep = 1 if lowbias32(states[r] ^ j) >= threshold, else 0.
// The product is written in that order so the result is bit for bit `x * keep.to(x.dtype) * scale`.
// The mask is recomputed from the states wherever it is needed: the backward is this same op applied
// to the output's gradient, so autograd keeps the [R] states, never an [R, F] mask.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(cherry, m) {
  m.def("node_dropout(Tensor x, Tensor states, int threshold, float scale) -> Tensor");
}
