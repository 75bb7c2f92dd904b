// CPU kernels of csr_aggregate (schema and contract: csrc/csr_aggregate.cpp).
//
// Forward is parallel over destination rows: each task owns its rows of `out`, so there are no write
// races and each row is summed in edge order (the order the reference's index_add uses, so float
// results match it bit for bit). Backward needs the adjoint scatter into x_src; rather than atomics or
// per-thread [S, F] buffers, sum and mean build the transposed adjacency (csc_transpose.h: O(S + E)
// int64, never O(E x F)) and are then parallel over source rows; max follows its [D, F] arg-max,
// parallel over feature columns (O(D x F) work, as DGL's scatter of the arg-max).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>

#include "../csc_transpose.h"

namespace cherry {
namespace {

enum class Reduce { kSum, kMean, kMax };

Reduce parse_reduce(c10::string_view name) {
  if (name == "sum") return Reduce::kSum;
  if (name == "mean") return Reduce::kMean;
  if (name == "max") return Reduce::kMax;
  TORCH_CHECK(false, "csr_aggregate: reduce must be 'sum', 'mean' or 'max', got '", std::string(name), "'");
}

// Rows per parallel task: about GRAIN_SIZE scalar operations each, at least one row.
int64_t row_grain(int64_t work_per_row) {
  return std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(work_per_row, 1));
}

void check_csc(const at::Tensor& indptr, const at::Tensor& indices) {
  TORCH_CHECK(indptr.dim() == 1 && indptr.scalar_type() == at::kLong, "indptr must be a 1-D int64 tensor");
  TORCH_CHECK(indices.dim() == 1 && indices.scalar_type() == at::kLong, "indices must be a 1-D int64 tensor");
  TORCH_CHECK(indptr.numel() >= 1, "indptr must have at least one entry");
}

template <typename scalar_t>
void forward_rows(const int64_t* ptr, const int64_t* idx, const scalar_t* x, scalar_t* out, int64_t* arg,
                  int64_t num_src, int64_t num_dst, int64_t feat, Reduce reduce) {
  const int64_t avg_deg = num_dst > 0 ? std::max<int64_t>(1, ptr[num_dst] / num_dst) : 1;
  at::parallel_for(0, num_dst, row_grain(feat * avg_deg), [&](int64_t begin, int64_t end) {
    for (int64_t d = begin; d < end; ++d) {
      scalar_t* o = out + d * feat;
      const int64_t first = ptr[d], last = ptr[d + 1];
      for (int64_t e = first; e < last; ++e) {
        TORCH_CHECK(idx[e] >= 0 && idx[e] < num_src, "indices[", e, "] = ", idx[e], " is outside [0, ", num_src, ")");
      }
      if (reduce == Reduce::kMax) {
        int64_t* a = arg + d * feat;
        if (first >= last) {
          std::fill(o, o + feat, scalar_t(0));
          std::fill(a, a + feat, int64_t(-1));
          continue;
        }
        // Two branch-free passes the compiler vectorises: the maximum, then the first edge that attains
        // it (the first maximum in segment order, as a strict '>' scan keeps). A NaN in the first edge
        // wins, as in that scan (NaN compares false), so a feature no edge matches points at the first.
        const scalar_t* x0 = x + idx[first] * feat;
        std::copy(x0, x0 + feat, o);
        for (int64_t e = first + 1; e < last; ++e) {
          const scalar_t* xe = x + idx[e] * feat;
          for (int64_t f = 0; f < feat; ++f) o[f] = xe[f] > o[f] ? xe[f] : o[f];
        }
        std::fill(a, a + feat, int64_t(-1));
        for (int64_t e = last - 1; e >= first; --e) {  // backwards: the earliest match is written last
          const scalar_t* xe = x + idx[e] * feat;
          for (int64_t f = 0; f < feat; ++f) a[f] = xe[f] == o[f] ? e : a[f];
        }
        for (int64_t f = 0; f < feat; ++f) a[f] = a[f] < 0 ? first : a[f];
      } else {
        std::fill(o, o + feat, scalar_t(0));
        for (int64_t e = first; e < last; ++e) {
          const scalar_t* xe = x + idx[e] * feat;
          for (int64_t f = 0; f < feat; ++f) o[f] += xe[f];
        }
        if (reduce == Reduce::kMean && last > first) {
          const scalar_t deg = static_cast<scalar_t>(last - first);
          for (int64_t f = 0; f < feat; ++f) o[f] /= deg;
        }
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor> csr_aggregate_forward_cpu(const at::Tensor& indptr, const at::Tensor& indices,
                                                             const at::Tensor& x_src, c10::string_view reduce_name) {
  check_csc(indptr, indices);
  TORCH_CHECK(x_src.dim() == 2, "x_src must be 2-D [num_src, features]");
  const Reduce reduce = parse_reduce(reduce_name);
  const auto ptr = indptr.contiguous();
  const auto idx = indices.contiguous();
  const auto x = x_src.contiguous();
  check_csc_segments(ptr, idx.numel());
  const int64_t num_dst = ptr.numel() - 1, feat = x.size(1);
  auto out = at::empty({num_dst, feat}, x.options());
  auto arg = reduce == Reduce::kMax ? at::empty({num_dst, feat}, ptr.options()) : at::empty({0}, ptr.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "csr_aggregate_forward_cpu", [&] {
    forward_rows<scalar_t>(ptr.data_ptr<int64_t>(), idx.data_ptr<int64_t>(), x.data_ptr<scalar_t>(),
                           out.data_ptr<scalar_t>(), reduce == Reduce::kMax ? arg.data_ptr<int64_t>() : nullptr,
                           x.size(0), num_dst, feat, reduce);
  });
  return std::make_tuple(out, arg);
}

// Max: each gradient element goes to its arg-max edge's source, O(D x F) work with no transposed
// adjacency. Tasks own feature columns (so no two write one element) and walk destinations in order,
// the order in which the transposed walk would add them.
template <typename scalar_t>
void max_backward_columns(const int64_t* idx, const scalar_t* g, const int64_t* arg, scalar_t* gx, int64_t num_src,
                          int64_t num_dst, int64_t num_edges, int64_t feat) {
  at::parallel_for(0, feat, std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(num_dst, 1)),
                   [&](int64_t begin, int64_t end) {
    for (int64_t d = 0; d < num_dst; ++d) {
      for (int64_t f = begin; f < end; ++f) {
        const int64_t e = arg[d * feat + f];
        if (e < 0) continue;  // an empty segment
        TORCH_CHECK(e < num_edges && idx[e] >= 0 && idx[e] < num_src, "argmax[", d, ", ", f, "] = ", e,
                    " is not an edge whose source is in [0, ", num_src, ")");
        gx[idx[e] * feat + f] += g[d * feat + f];
      }
    }
  });
}

// Sum and mean: parallel over source rows of the transposed adjacency (file comment).
template <typename scalar_t>
void backward_rows(const int64_t* ptr, const Transposed& t, const scalar_t* g, scalar_t* gx, int64_t num_src,
                   int64_t feat, Reduce reduce) {
  const int64_t* tp = t.ptr.data_ptr<int64_t>();
  const int64_t* te = t.edge.data_ptr<int64_t>();
  const int64_t* td = t.dst.data_ptr<int64_t>();
  const int64_t avg_deg = num_src > 0 ? std::max<int64_t>(1, tp[num_src] / num_src) : 1;
  at::parallel_for(0, num_src, row_grain(feat * avg_deg), [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      scalar_t* o = gx + s * feat;
      std::fill(o, o + feat, scalar_t(0));
      for (int64_t p = tp[s]; p < tp[s + 1]; ++p) {
        const int64_t d = td[p];
        const scalar_t* gd = g + d * feat;
        if (reduce == Reduce::kMean) {
          // Divide (not multiply by a reciprocal) so the result equals the reference's autograd exactly.
          const scalar_t deg = static_cast<scalar_t>(ptr[d + 1] - ptr[d]);
          for (int64_t f = 0; f < feat; ++f) o[f] += gd[f] / deg;
        } else {
          for (int64_t f = 0; f < feat; ++f) o[f] += gd[f];
        }
      }
    }
  });
}

at::Tensor csr_aggregate_backward_cpu(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& grad_out,
                                      const at::Tensor& argmax, int64_t num_src, c10::string_view reduce_name) {
  check_csc(indptr, indices);
  const Reduce reduce = parse_reduce(reduce_name);
  TORCH_CHECK(grad_out.dim() == 2 && grad_out.size(0) == indptr.numel() - 1,
              "grad_out must be [num_dst, features]");
  TORCH_CHECK(num_src >= 0, "num_src must be >= 0");
  const auto ptr = indptr.contiguous();
  const auto idx = indices.contiguous();
  const auto g = grad_out.contiguous();
  const auto arg = argmax.contiguous();
  if (reduce == Reduce::kMax) {
    TORCH_CHECK(arg.scalar_type() == at::kLong && arg.sizes() == g.sizes(), "argmax must be int64 shaped like grad_out");
  }
  check_csc_segments(ptr, idx.numel());
  const int64_t feat = g.size(1);
  if (reduce == Reduce::kMax) {
    auto grad_x = at::zeros({num_src, feat}, g.options());
    AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "csr_aggregate_max_backward_cpu", [&] {
      max_backward_columns<scalar_t>(idx.data_ptr<int64_t>(), g.data_ptr<scalar_t>(), arg.data_ptr<int64_t>(),
                                     grad_x.data_ptr<scalar_t>(), num_src, g.size(0), idx.numel(), feat);
    });
    return grad_x;
  }
  auto grad_x = at::empty({num_src, feat}, g.options());
  const Transposed t = transpose_csc(ptr, idx, num_src);
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "csr_aggregate_backward_cpu", [&] {
    backward_rows<scalar_t>(ptr.data_ptr<int64_t>(), t, g.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(), num_src,
                            feat, reduce);
  });
  return grad_x;
}

}  // namespace
}  // namespace cherry

TORCH_LIBRARY_IMPL(cherry, CPU, m) {
  m.impl("csr_aggregate_forward", &cherry::csr_aggregate_forward_cpu);
  m.impl("csr_aggregate_backward", &cherry::csr_aggregate_backward_cpu);
}
