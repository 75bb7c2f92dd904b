// Schema of the fused attention aggregation (kernels: cpu/attention_aggregate.cpp,
// cuda/attention_aggregate.cu): DGL's u_mul_e_sum with per-head edge weights, as GAT aggregates.
//
// attention_aggregate_forward(indptr [D+1], indices [E], z [S, H, F], alpha [E, H]) -> out [D, H, F]
//   out[d, h, :] = sum over e in [indptr[d], indptr[d+1]) of alpha[e, h] * z[indices[e], h, :];
//   an empty segment gives 0. Sums run in edge order.
// attention_aggregate_backward(indptr, indices, grad_out [D, H, F], z, alpha) -> (grad_z [S, H, F],
//                                                                                grad_alpha [E, H])
//   grad_z[s, h, :] = sum over edges e with indices[e] = s of alpha[e, h] * grad_out[dst(e), h, :];
//   grad_alpha[e, h] = grad_out[dst(e), h, :] . z[indices[e], h, :].
// Neither direction holds an [E, H, F] tensor: memory is O(D x H x F + S x H x F + E x H) plus, on the
// CPU's backward, an O(S + E) int64 transposed adjacency.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(cherry, m) {
  m.def("attention_aggregate_forward(Tensor indptr, Tensor indices, Tensor z, Tensor alpha) -> Tensor");
  m.def(
      "attention_aggregate_backward(Tensor indptr, Tensor indices, Tensor grad_out, Tensor z, Tensor alpha) -> "
      "(Tensor, Tensor)");
}
