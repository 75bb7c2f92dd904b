// CPU kernel of node_dropout (schema and contract: csrc/node_dropout.cpp).
//
// Parallel over rows; each element's keep bit is hashed where it is used, so the only memory is the
// output. Rows are owned by one task each: no write races.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../node_dropout.h"

#include <algorithm>

namespace cherry {
namespace {

template <typename scalar_t>
void dropout_rows(const scalar_t* x, const int64_t* states, scalar_t* out, int64_t rows, int64_t width,
                  int64_t threshold, scalar_t scale) {
  const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(width, 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t state = states[r];
      const scalar_t* xr = x + r * width;
      scalar_t* yr = out + r * width;
      for (int64_t j = 0; j < width; ++j) {
        const scalar_t keep = dropout_keeps(state, j, threshold) ? scalar_t(1) : scalar_t(0);
        yr[j] = (xr[j] * keep) * scale;
      }
    }
  });
}

at::Tensor node_dropout_cpu(const at::Tensor& x, const at::Tensor& states, int64_t threshold, double scale) {
  check_node_dropout_args(x, states, threshold);
  const auto xc = x.contiguous();
  const auto sc = states.contiguous();
  auto out = at::empty_like(xc);
  if (xc.numel() == 0) return out;
  AT_DISPATCH_FLOATING_TYPES(xc.scalar_type(), "node_dropout_cpu", [&] {
    dropout_rows<scalar_t>(xc.data_ptr<scalar_t>(), sc.data_ptr<int64_t>(), out.data_ptr<scalar_t>(), xc.size(0),
                           xc.size(1), threshold, static_cast<scalar_t>(scale));
  });
  return out;
}

}  // namespace
}  // namespace cherry

TORCH_LIBRARY_IMPL(cherry, CPU, m) {
  m.impl("node_dropout", &cherry::node_dropout_cpu);
}
