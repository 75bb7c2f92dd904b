// CPU kernels of attention_aggregate (schema and contract: csrc/attention_aggregate.cpp).
//
// Forward and grad_alpha are parallel over destinations: a task owns its destinations' output rows and
// their segment's edges, so there are no write races; each row is summed in edge order, the order in
// which a segment sum over materialised messages (and the reference's index_add) adds, so results
// match them bit for bit. grad_z scatters into source rows: rather than atomics or per-thread [S, H, F]
// buffers it walks the transposed adjacency (csc_transpose.h, O(S + E) int64), parallel over sources.
// No [E, H, F] tensor exists in either direction.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>

#include "../attention_aggregate.h"
#include "../csc_transpose.h"

namespace cherry {
namespace {

// Rows per parallel task: about GRAIN_SIZE scalar operations each, at least one row.
int64_t rows_per_task(int64_t work_per_row) {
  return std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(work_per_row, 1));
}

struct Dims {
  int64_t num_src, num_dst, num_edges, heads, feat;
};

Dims dims_of(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& z, const at::Tensor& alpha) {
  check_attention_args(indptr, indices, z, alpha);
  return Dims{z.size(0), indptr.numel() - 1, indices.numel(), z.size(1), z.size(2)};
}

template <typename scalar_t>
void forward_rows(const int64_t* ptr, const int64_t* idx, const scalar_t* z, const scalar_t* alpha, scalar_t* out,
                  const Dims& n) {
  const int64_t row = n.heads * n.feat;
  const int64_t avg_deg = n.num_dst > 0 ? std::max<int64_t>(1, n.num_edges / n.num_dst) : 1;
  at::parallel_for(0, n.num_dst, rows_per_task(row * avg_deg), [&](int64_t begin, int64_t end) {
    for (int64_t d = begin; d < end; ++d) {
      scalar_t* o = out + d * row;
      std::fill(o, o + row, scalar_t(0));
      for (int64_t e = ptr[d]; e < ptr[d + 1]; ++e) {
        TORCH_CHECK(idx[e] >= 0 && idx[e] < n.num_src, "indices[", e, "] = ", idx[e], " is outside [0, ", n.num_src,
                    ")");
        const scalar_t* ze = z + idx[e] * row;
        for (int64_t h = 0; h < n.heads; ++h) {
          const scalar_t a = alpha[e * n.heads + h];
          scalar_t* oh = o + h * n.feat;
          const scalar_t* zh = ze + h * n.feat;
          for (int64_t f = 0; f < n.feat; ++f) oh[f] += zh[f] * a;
        }
      }
    }
  });
}

template <typename scalar_t>
void grad_alpha_rows(const int64_t* ptr, const int64_t* idx, const scalar_t* g, const scalar_t* z, scalar_t* ga,
                     const Dims& n) {
  const int64_t row = n.heads * n.feat;
  const int64_t avg_deg = n.num_dst > 0 ? std::max<int64_t>(1, n.num_edges / n.num_dst) : 1;
  at::parallel_for(0, n.num_dst, rows_per_task(row * avg_deg), [&](int64_t begin, int64_t end) {
    for (int64_t d = begin; d < end; ++d) {
      const scalar_t* gd = g + d * row;
      for (int64_t e = ptr[d]; e < ptr[d + 1]; ++e) {
        const scalar_t* ze = z + idx[e] * row;
        for (int64_t h = 0; h < n.heads; ++h) {
          scalar_t dot = scalar_t(0);
          for (int64_t f = 0; f < n.feat; ++f) dot += gd[h * n.feat + f] * ze[h * n.feat + f];
          ga[e * n.heads + h] = dot;
        }
      }
    }
  });
}

template <typename scalar_t>
void grad_z_rows(const Transposed& t, const scalar_t* g, const scalar_t* alpha, scalar_t* gz, const Dims& n) {
  const int64_t* tp = t.ptr.data_ptr<int64_t>();
  const int64_t* te = t.edge.data_ptr<int64_t>();
  const int64_t* td = t.dst.data_ptr<int64_t>();
  const int64_t row = n.heads * n.feat;
  const int64_t avg_deg = n.num_src > 0 ? std::max<int64_t>(1, n.num_edges / n.num_src) : 1;
  at::parallel_for(0, n.num_src, rows_per_task(row * avg_deg), [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      scalar_t* o = gz + s * row;
      std::fill(o, o + row, scalar_t(0));
      for (int64_t p = tp[s]; p < tp[s + 1]; ++p) {  // this source's edges, in increasing edge order
        const scalar_t* gd = g + td[p] * row;
        for (int64_t h = 0; h < n.heads; ++h) {
          const scalar_t a = alpha[te[p] * n.heads + h];
          for (int64_t f = 0; f < n.feat; ++f) o[h * n.feat + f] += gd[h * n.feat + f] * a;
        }
      }
    }
  });
}

at::Tensor attention_aggregate_forward_cpu(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& z,
                                           const at::Tensor& alpha) {
  const Dims n = dims_of(indptr, indices, z, alpha);
  const auto ptr = indptr.contiguous();
  const auto idx = indices.contiguous();
  const auto zc = z.contiguous();
  const auto ac = alpha.contiguous();
  check_csc_segments(ptr, n.num_edges);
  auto out = at::empty({n.num_dst, n.heads, n.feat}, zc.options());
  AT_DISPATCH_FLOATING_TYPES(zc.scalar_type(), "attention_aggregate_forward_cpu", [&] {
    forward_rows<scalar_t>(ptr.data_ptr<int64_t>(), idx.data_ptr<int64_t>(), zc.data_ptr<scalar_t>(),
                           ac.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n);
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> attention_aggregate_backward_cpu(const at::Tensor& indptr,
                                                                    const at::Tensor& indices,
                                                                    const at::Tensor& grad_out, const at::Tensor& z,
                                                                    const at::Tensor& alpha) {
  const Dims n = dims_of(indptr, indices, z, alpha);
  check_attention_grad(indptr, grad_out, z);
  const auto ptr = indptr.contiguous();
  const auto idx = indices.contiguous();
  const auto g = grad_out.contiguous();
  const auto zc = z.contiguous();
  const auto ac = alpha.contiguous();
  check_csc_segments(ptr, n.num_edges);
  const Transposed t = transpose_csc(ptr, idx, n.num_src);  // also checks every index is in range
  auto grad_z = at::empty({n.num_src, n.heads, n.feat}, g.options());
  auto grad_alpha = at::empty({n.num_edges, n.heads}, g.options());
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "attention_aggregate_backward_cpu", [&] {
    grad_alpha_rows<scalar_t>(ptr.data_ptr<int64_t>(), idx.data_ptr<int64_t>(), g.data_ptr<scalar_t>(),
                              zc.data_ptr<scalar_t>(), grad_alpha.data_ptr<scalar_t>(), n);
    grad_z_rows<scalar_t>(t, g.data_ptr<scalar_t>(), ac.data_ptr<scalar_t>(), grad_z.data_ptr<scalar_t>(), n);
  });
  return std::make_tuple(grad_z, grad_alpha);
}

}  // namespace
}  // namespace cherry

TORCH_LIBRARY_IMPL(cherry, CPU, m) {
  m.impl("attention_aggregate_forward", &cherry::attention_aggregate_forward_cpu);
  m.impl("attention_aggregate_backward", &cherry::attention_aggregate_backward_cpu);
}
