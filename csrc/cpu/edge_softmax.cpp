// CPU kernels of edge_softmax (schema and contract: csrc/edge_softmax.cpp).
//
// Both directions are parallel over destination segments; a segment's edges are contiguous and owned
// by one task, so there are no write races. Per task the only scratch is two length-H vectors.
// Sums run in edge order, the order of the reference's index_add.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../csc_transpose.h"

namespace cherry {
namespace {

void check_segments(const at::Tensor& indptr, int64_t num_edges) {
  TORCH_CHECK(indptr.dim() == 1 && indptr.scalar_type() == at::kLong && indptr.numel() >= 1,
              "indptr must be a non-empty 1-D int64 tensor");
  check_csc_segments(indptr, num_edges);
}

int64_t heads_of(const at::Tensor& t) {
  TORCH_CHECK(t.dim() >= 1, "edge tensors must be [E] or [E, H]");
  return t.size(0) > 0 ? t.numel() / t.size(0) : (t.dim() >= 2 ? t.size(1) : 1);
}

int64_t seg_grain(const int64_t* ptr, int64_t num_dst, int64_t heads) {
  const int64_t avg_deg = num_dst > 0 ? std::max<int64_t>(1, ptr[num_dst] / num_dst) : 1;
  return std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(heads * avg_deg, 1));
}

template <typename scalar_t>
void softmax_segments(const int64_t* ptr, const scalar_t* s, scalar_t* y, int64_t num_dst, int64_t heads) {
  at::parallel_for(0, num_dst, seg_grain(ptr, num_dst, heads), [&](int64_t begin, int64_t end) {
    std::vector<scalar_t> seg_max(heads), seg_sum(heads);
    for (int64_t d = begin; d < end; ++d) {
      const int64_t first = ptr[d], last = ptr[d + 1];
      if (first >= last) continue;
      std::fill(seg_max.begin(), seg_max.end(), -std::numeric_limits<scalar_t>::infinity());
      std::fill(seg_sum.begin(), seg_sum.end(), scalar_t(0));
      for (int64_t e = first; e < last; ++e) {
        for (int64_t h = 0; h < heads; ++h) {
          const scalar_t v = s[e * heads + h];
          // NaN wins, as in the reference's amax, so a NaN score poisons its segment visibly.
          if (v > seg_max[h] || std::isnan(v)) seg_max[h] = v;
        }
      }
      for (int64_t e = first; e < last; ++e) {
        for (int64_t h = 0; h < heads; ++h) {
          const scalar_t v = std::exp(s[e * heads + h] - seg_max[h]);
          y[e * heads + h] = v;
          seg_sum[h] += v;
        }
      }
      for (int64_t e = first; e < last; ++e) {
        for (int64_t h = 0; h < heads; ++h) y[e * heads + h] /= seg_sum[h];
      }
    }
  });
}

template <typename scalar_t>
void softmax_backward_segments(const int64_t* ptr, const scalar_t* y, const scalar_t* g, scalar_t* gs,
                               int64_t num_dst, int64_t heads) {
  at::parallel_for(0, num_dst, seg_grain(ptr, num_dst, heads), [&](int64_t begin, int64_t end) {
    std::vector<scalar_t> dot(heads);
    for (int64_t d = begin; d < end; ++d) {
      const int64_t first = ptr[d], last = ptr[d + 1];
      std::fill(dot.begin(), dot.end(), scalar_t(0));
      for (int64_t e = first; e < last; ++e) {
        for (int64_t h = 0; h < heads; ++h) dot[h] += g[e * heads + h] * y[e * heads + h];
      }
      for (int64_t e = first; e < last; ++e) {
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t i = e * heads + h;
          gs[i] = y[i] * (g[i] - dot[h]);
        }
      }
    }
  });
}

at::Tensor edge_softmax_forward_cpu(const at::Tensor& indptr, const at::Tensor& scores) {
  const auto ptr = indptr.contiguous();
  const auto s = scores.contiguous();
  check_segments(ptr, s.dim() >= 1 ? s.size(0) : 0);
  const int64_t heads = heads_of(s);
  auto y = at::empty_like(s);
  AT_DISPATCH_FLOATING_TYPES(s.scalar_type(), "edge_softmax_forward_cpu", [&] {
    softmax_segments<scalar_t>(ptr.data_ptr<int64_t>(), s.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                               ptr.numel() - 1, heads);
  });
  return y;
}

at::Tensor edge_softmax_backward_cpu(const at::Tensor& indptr, const at::Tensor& out, const at::Tensor& grad_out) {
  const auto ptr = indptr.contiguous();
  const auto y = out.contiguous();
  const auto g = grad_out.contiguous();
  TORCH_CHECK(y.sizes() == g.sizes() && y.scalar_type() == g.scalar_type(),
              "edge_softmax_backward: out and grad_out must have the same shape and dtype");
  check_segments(ptr, y.dim() >= 1 ? y.size(0) : 0);
  const int64_t heads = heads_of(y);
  auto gs = at::empty_like(y);
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "edge_softmax_backward_cpu", [&] {
    softmax_backward_segments<scalar_t>(ptr.data_ptr<int64_t>(), y.data_ptr<scalar_t>(), g.data_ptr<scalar_t>(),
                                        gs.data_ptr<scalar_t>(), ptr.numel() - 1, heads);
  });
  return gs;
}

}  // namespace
}  // namespace cherry

TORCH_LIBRARY_IMPL(cherry, CPU, m) {
  m.impl("edge_softmax_forward", &cherry::edge_softmax_forward_cpu);
  m.impl("edge_softmax_backward", &cherry::edge_softmax_backward_cpu);
}
