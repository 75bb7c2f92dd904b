// CUDA kernels of cherry::slice_layer and cherry::slice_layer_many (contracts:
// cherry/ops/reference_sampling.py). Edges are gathered by per-edge threads; the first appearance of
// every reached parent source is an atomic min over a dense array of the parent's sources, and
// sorting the reached ones by it gives the sources in first-appearance order without any sequential
// pass. slice_layer_many runs slice_layer once per group on the host and concatenates: simple and
// exact; K launches of a few kernels each are cheap next to the micro-batches' own compute.
// Per-op ATen headers instead of <ATen/ATen.h>: the same API, a fraction of the parse time under nvcc.
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/nonzero.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace {

constexpr int kThreads = 256;

inline int blocks_for(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

__global__ void degree_kernel(const int64_t* ip, const int64_t* dst, int64_t n, int64_t* deg, int64_t* first) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t d = dst[i];
  deg[i] = ip[d + 1] - ip[d];
  first[d] = i;  // destinations are distinct and precede every edge in the appearance order
}

__global__ void gather_kernel(const int64_t* ip, const int64_t* ind, const int64_t* dst, int64_t n,
                              const int64_t* sub_ip, int64_t num_edges, int64_t* edges,
                              unsigned long long* first) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= num_edges) return;
  int64_t lo = 0, hi = n - 1;  // the destination i with sub_ip[i] <= e < sub_ip[i + 1]
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (sub_ip[mid + 1] > e) hi = mid; else lo = mid + 1;
  }
  const int64_t p = ind[ip[dst[lo]] + (e - sub_ip[lo])];
  edges[e] = p;
  atomicMin(first + p, static_cast<unsigned long long>(n + e));
}

__global__ void renumber_kernel(const int64_t* src_positions, int64_t n, int64_t* local) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k < n) local[src_positions[k]] = k;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> slice_layer_cuda(
    const at::Tensor& indptr_in, const at::Tensor& indices_in, const at::Tensor& dst_in,
    int64_t num_parent_src) {
  TORCH_CHECK(indptr_in.scalar_type() == at::kLong && indices_in.scalar_type() == at::kLong &&
                  dst_in.scalar_type() == at::kLong,
              "slice_layer: indptr, indices and dst_positions must be int64");
  TORCH_CHECK(num_parent_src >= indptr_in.numel() - 1, "slice_layer: num_parent_src (", num_parent_src,
              ") must be >= the parent's destinations (", indptr_in.numel() - 1, ")");
  const c10::cuda::CUDAGuard guard(dst_in.device());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const at::Tensor indptr = indptr_in.contiguous();
  const at::Tensor indices = indices_in.contiguous();
  const at::Tensor dst = dst_in.contiguous();
  const int64_t n = dst.numel();
  const auto opts = indptr.options();

  at::Tensor deg = at::empty({n}, opts);
  at::Tensor first = at::full({num_parent_src}, std::numeric_limits<int64_t>::max(), opts);
  if (n > 0) {
    degree_kernel<<<blocks_for(n), kThreads, 0, stream>>>(indptr.data_ptr<int64_t>(), dst.data_ptr<int64_t>(), n,
                                                          deg.data_ptr<int64_t>(), first.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  at::Tensor sub_indptr = at::zeros({n + 1}, opts);
  sub_indptr.narrow(0, 1, n).copy_(at::cumsum(deg, 0));
  const int64_t num_edges = sub_indptr[n].item<int64_t>();
  at::Tensor edges = at::empty({num_edges}, opts);
  if (num_edges > 0) {
    gather_kernel<<<blocks_for(num_edges), kThreads, 0, stream>>>(
        indptr.data_ptr<int64_t>(), indices.data_ptr<int64_t>(), dst.data_ptr<int64_t>(), n,
        sub_indptr.data_ptr<int64_t>(), num_edges, edges.data_ptr<int64_t>(),
        reinterpret_cast<unsigned long long*>(first.data_ptr<int64_t>()));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  const at::Tensor reached = at::nonzero(first.lt(std::numeric_limits<int64_t>::max())).reshape({-1});
  const at::Tensor order = std::get<1>(at::sort(first.index_select(0, reached), /*stable=*/true, 0, false));
  const at::Tensor src_positions = reached.index_select(0, order).contiguous();
  at::Tensor local = at::empty({num_parent_src}, opts);
  const int64_t num_src = src_positions.numel();
  if (num_src > 0) {
    renumber_kernel<<<blocks_for(num_src), kThreads, 0, stream>>>(src_positions.data_ptr<int64_t>(), num_src,
                                                                  local.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return {sub_indptr, local.index_select(0, edges), src_positions};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, std::vector<int64_t>, std::vector<int64_t>>
slice_layer_many_cuda(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& dst,
                      at::IntArrayRef group_offsets, const at::Tensor& parent_src_nodes) {
  TORCH_CHECK(parent_src_nodes.scalar_type() == at::kLong && parent_src_nodes.dim() == 1,
              "slice_layer_many: parent_src_nodes must be a one-dimensional int64 tensor");
  TORCH_CHECK(indptr.device() == dst.device() && indices.device() == dst.device() &&
                  parent_src_nodes.device() == dst.device(),
              "slice_layer_many: all tensors must be on one device");
  TORCH_CHECK(dst.scalar_type() == at::kLong && dst.dim() == 1,
              "slice_layer_many: dst_positions must be a one-dimensional int64 tensor");
  TORCH_CHECK(!group_offsets.empty(), "slice_layer_many: group_offsets must have at least one entry");
  const int64_t num_groups = static_cast<int64_t>(group_offsets.size()) - 1;
  TORCH_CHECK(group_offsets[0] == 0 && group_offsets[num_groups] == dst.numel(),
              "slice_layer_many: group_offsets must run from 0 to ", dst.numel());
  const c10::cuda::CUDAGuard guard(dst.device());
  const int64_t num_parent_src = parent_src_nodes.numel();
  std::vector<at::Tensor> indptrs, edges, srcs;
  std::vector<int64_t> src_offsets{0}, edge_offsets{0};
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t n = group_offsets[g + 1] - group_offsets[g];
    TORCH_CHECK(n >= 0, "slice_layer_many: group_offsets must be non-decreasing");
    auto out = slice_layer_cuda(indptr, indices, dst.narrow(0, group_offsets[g], n), num_parent_src);
    indptrs.push_back(std::get<0>(out));
    edges.push_back(std::get<1>(out));
    srcs.push_back(std::get<2>(out));
    edge_offsets.push_back(edge_offsets.back() + edges.back().numel());
    src_offsets.push_back(src_offsets.back() + srcs.back().numel());
  }
  const auto opts = dst.options();
  if (num_groups == 0) {
    const at::Tensor none = at::empty({0}, opts);
    return {none, none.clone(), none.clone(), none.clone(), src_offsets, edge_offsets};
  }
  const at::Tensor src_positions = at::cat(srcs);
  return {at::cat(indptrs), at::cat(edges), src_positions, parent_src_nodes.index_select(0, src_positions),
          src_offsets, edge_offsets};
}

}  // namespace

TORCH_LIBRARY_IMPL(cherry, CUDA, m) {
  m.impl("slice_layer", &slice_layer_cuda);
  m.impl("slice_layer_many", &slice_layer_many_cuda);
}
