// Schema of the segment softmax over each destination's in-edges (kernels: cpu/edge_softmax.cpp,
// cuda/edge_softmax.cu). Scores are [E] or [E, H]; a 1-D input is treated as H = 1.
//
// edge_softmax_forward(indptr [D+1], scores [E(, H)]) -> out, same shape as scores:
//   out[e, h] = exp(s[e, h] - max_seg s[:, h]) / sum_seg exp(s[:, h] - max_seg s[:, h]).
// edge_softmax_backward(indptr, out, grad_out) -> grad_scores:
//   grad_s[e, h] = out[e, h] * (grad_out[e, h] - sum_seg grad_out[:, h] * out[:, h]).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(cherry, m) {
  m.def("edge_softmax_forward(Tensor indptr, Tensor scores) -> Tensor");
  m.def("edge_softmax_backward(Tensor indptr, Tensor out, Tensor grad_out) -> Tensor");
}
