// Schema of the fused CSC aggregation op (kernels: cpu/csr_aggregate.cpp, cuda/csr_aggregate.cu).
//
// csr_aggregate_forward(indptr [D+1], indices [E], x_src [S, F], reduce) -> (out [D, F], argmax)
//   out[d] = reduce over e in [indptr[d], indptr[d+1]) of x_src[indices[e]]; empty segments give 0.
//   reduce is "sum", "mean" or "max". For "max", argmax is int64 [D, F] holding the winning *edge
//   position* e (first maximum in segment order; -1 for an empty segment); otherwise argmax is an
//   empty int64 tensor. Memory is O(D x F): no [E, F] message tensor exists.
// csr_aggregate_backward(indptr, indices, grad_out [D, F], argmax, num_src, reduce) -> grad_x [S, F]
//   The adjoint of the forward for the same reduce.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(cherry, m) {
  m.def("csr_aggregate_forward(Tensor indptr, Tensor indices, Tensor x_src, str reduce) -> (Tensor, Tensor)");
  m.def(
      "csr_aggregate_backward(Tensor indptr, Tensor indices, Tensor grad_out, Tensor argmax, int num_src, "
      "str reduce) -> Tensor");
}
