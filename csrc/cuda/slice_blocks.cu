// CUDA kernels of cherry::slice_layer and cherry::slice_layer_many (contracts:
// cherry/ops/reference_sampling.py). slice_layer is slice_layer_many of one group without the gather
// of global ids.
//
// All K groups of a layer are sliced together, with one read-back of their sizes (a micro-batch
// split is K groups x L layers of small slices, so a host loop over groups would cost K x L syncs):
//  1. per destination: its group, its degree; a cumulative sum gives every edge's output slot
//     (groups are laid out one after another, so the global edge order is the output order);
//  2. a dense first-appearance map per group over the parent's sources: every destination and edge of
//     group g stores its position in g's appearance sequence (the group's destinations, then its
//     edges) with an atomic minimum at map[g][source]; the one atomic that replaces the empty value
//     counts a distinct source of g;
//  3. the per-group edge and source counts come back to the host in one copy (the outputs' sizes,
//     which the caller needs as host offsets anyway);
//  4. an element is its source's first appearance iff its position equals the map's minimum; a
//     prefix sum over these flags (all groups in one sequence) gives each source its output slot, in
//     first-appearance order within each group, exactly the CPU kernel's and the reference's order;
//     the map entry is then overwritten with the source's local index and the edges read it.
// Destinations are handled one warp each (lanes stride over its edges), which keeps hubs from
// serialising a thread. The map holds K x num_parent_src keys (32-bit unless a parent is huge); when
// that would exceed kMaxMapEntries, groups are sliced in passes of as many groups as fit (one
// read-back per pass) and the passes' outputs concatenated.
// Per-op ATen headers instead of <ATen/ATen.h>: the same API, a fraction of the parse time under nvcc.
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = kThreads / kWarp;
// The map's size per pass (128 MiB of 32-bit keys): above it, groups are sliced in several passes.
constexpr int64_t kMaxMapEntries = int64_t{1} << 25;

inline unsigned int blocks_for(int64_t n) { return static_cast<unsigned int>((n + kThreads - 1) / kThreads); }
inline unsigned int warp_blocks_for(int64_t n) {
  return static_cast<unsigned int>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

// The group of destination i: the last g in [0, k) with go[g] <= i (go non-decreasing, go[k] = n;
// an empty group shares its offset with the next one and is skipped).
__device__ __forceinline__ int64_t group_of(const int64_t* go, int64_t k, int64_t i) {
  int64_t lo = 0, hi = k - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (go[mid] <= i) lo = mid; else hi = mid - 1;
  }
  return lo;
}

__global__ void degree_kernel(const int64_t* ip, const int64_t* dst, const int64_t* go, int64_t k, int64_t n,
                              int64_t* deg, int64_t* grp) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t d = dst[i];
  deg[i] = ip[d + 1] - ip[d];
  grp[i] = group_of(go, k, i);
}

// Per group g in [0, k]: eo[g], the edges of the groups before g; and the leading 0 of g's indptr.
__global__ void group_kernel(const int64_t* go, int64_t k, const int64_t* cum, int64_t* eo, int64_t* sub_ip) {
  const int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (g > k) return;
  eo[g] = go[g] == 0 ? 0 : cum[go[g] - 1];
  if (g < k) sub_ip[go[g] + g] = 0;
}

// The fields every per-destination kernel reads: destination i of group g, its degree and where its
// edges start in the parent (ip/ind) and in the output (out_edge).
struct DstView {
  int64_t g, gs, ng, d, start, deg, out_edge;
};

__device__ __forceinline__ DstView view_of(int64_t i, const int64_t* ip, const int64_t* dst, const int64_t* go,
                                           const int64_t* grp, const int64_t* deg, const int64_t* cum) {
  DstView v;
  v.g = grp[i];
  v.gs = go[v.g];
  v.ng = go[v.g + 1] - v.gs;
  v.d = dst[i];
  v.start = ip[v.d];
  v.deg = deg[i];
  v.out_edge = cum[i] - v.deg;
  return v;
}

template <typename KeyT>
__global__ void mark_kernel(const int64_t* ip, const int64_t* ind, const int64_t* dst, const int64_t* go,
                            const int64_t* grp, const int64_t* deg, const int64_t* cum, const int64_t* eo, int64_t n,
                            int64_t num_parent_src, KeyT* map, unsigned long long* counts, int64_t* sub_ip) {
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (i >= n) return;  // uniform over the warp
  const DstView v = view_of(i, ip, dst, go, grp, deg, cum);
  KeyT* row = map + v.g * num_parent_src;
  const KeyT empty = std::numeric_limits<KeyT>::max();
  unsigned int fresh = 0;  // lane 0's count of the distinct sources this warp found first
  if (lane == 0) {
    sub_ip[i + v.g + 1] = v.out_edge + v.deg - eo[v.g];
    fresh += atomicMin(row + v.d, static_cast<KeyT>(i - v.gs)) == empty;
  }
  // Edge j of this destination is element ng + (its group-local edge index) of g's sequence.
  const int64_t base_key = v.ng + (v.out_edge - eo[v.g]);
  for (int64_t base = 0; base < v.deg; base += kWarp) {  // the same trip count on every lane
    const int64_t j = base + lane;
    bool is_new = false;
    if (j < v.deg) is_new = atomicMin(row + ind[v.start + j], static_cast<KeyT>(base_key + j)) == empty;
    const unsigned int ballot = __ballot_sync(0xffffffffu, is_new);
    if (lane == 0) fresh += __popc(ballot);
  }
  if (lane == 0 && fresh > 0) atomicAdd(counts + v.g, static_cast<unsigned long long>(fresh));
}

// Element positions in the one sequence of all groups: group g starts at gs + eo[g]; destination i
// is at i + eo[g], edge j of destination i at go[g + 1] + out_edge + j.
template <typename KeyT>
__global__ void flag_kernel(const int64_t* ip, const int64_t* ind, const int64_t* dst, const int64_t* go,
                            const int64_t* grp, const int64_t* deg, const int64_t* cum, const int64_t* eo, int64_t n,
                            int64_t num_parent_src, const KeyT* map, uint8_t* flags) {
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (i >= n) return;
  const DstView v = view_of(i, ip, dst, go, grp, deg, cum);
  const KeyT* row = map + v.g * num_parent_src;
  if (lane == 0) flags[i + eo[v.g]] = row[v.d] == static_cast<KeyT>(i - v.gs);
  const int64_t base_key = v.ng + (v.out_edge - eo[v.g]);
  const int64_t base_pos = go[v.g + 1] + v.out_edge;
  for (int64_t j = lane; j < v.deg; j += kWarp) {
    flags[base_pos + j] = row[ind[v.start + j]] == static_cast<KeyT>(base_key + j);
  }
}

// Every first appearance takes its output slot scan[pos] - 1 (scan: inclusive prefix sum of the
// flags); the map entry becomes the source's index within its group.
template <typename KeyT>
__global__ void assign_kernel(const int64_t* ip, const int64_t* ind, const int64_t* dst, const int64_t* go,
                              const int64_t* grp, const int64_t* deg, const int64_t* cum, const int64_t* eo, int64_t n,
                              int64_t num_parent_src, const uint8_t* flags, const int64_t* scan,
                              const int64_t* nodes, KeyT* map, int64_t* src_positions, int64_t* src_nodes) {
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (i >= n) return;
  const DstView v = view_of(i, ip, dst, go, grp, deg, cum);
  KeyT* row = map + v.g * num_parent_src;
  const int64_t group_pos = v.gs + eo[v.g];
  const int64_t so = group_pos == 0 ? 0 : scan[group_pos - 1];  // sources of the groups before g
  auto take = [&](int64_t pos, int64_t p) {
    if (!flags[pos]) return;
    const int64_t slot = scan[pos] - 1;
    src_positions[slot] = p;
    if (nodes != nullptr) src_nodes[slot] = nodes[p];
    row[p] = static_cast<KeyT>(slot - so);
  };
  if (lane == 0) take(i + eo[v.g], v.d);
  const int64_t base_pos = go[v.g + 1] + v.out_edge;
  for (int64_t j = lane; j < v.deg; j += kWarp) take(base_pos + j, ind[v.start + j]);
}

template <typename KeyT>
__global__ void edge_kernel(const int64_t* ip, const int64_t* ind, const int64_t* dst, const int64_t* go,
                            const int64_t* grp, const int64_t* deg, const int64_t* cum, int64_t n,
                            int64_t num_parent_src, const KeyT* map, int64_t* sub_indices) {
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (i >= n) return;
  const DstView v = view_of(i, ip, dst, go, grp, deg, cum);
  const KeyT* row = map + v.g * num_parent_src;
  for (int64_t j = lane; j < v.deg; j += kWarp) {
    sub_indices[v.out_edge + j] = static_cast<int64_t>(row[ind[v.start + j]]);
  }
}

struct Sliced {
  at::Tensor sub_indptr, sub_indices, src_positions, src_nodes;
  std::vector<int64_t> src_offsets, edge_offsets;
};

// One pass over groups whose offsets (host) are `go_host` (go_host[0] == 0, go_host.back() ==
// dst.numel()); `nodes` may be undefined (then src_nodes is too).
template <typename KeyT>
Sliced slice_pass(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& dst,
                  const std::vector<int64_t>& go_host, int64_t num_parent_src, const at::Tensor& nodes) {
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const auto opts = dst.options();
  const int64_t k = static_cast<int64_t>(go_host.size()) - 1;
  const int64_t n = dst.numel();
  Sliced out;
  out.sub_indptr = at::empty({n + k}, opts);
  if (n == 0) {
    out.sub_indptr.zero_();
    out.sub_indices = at::empty({0}, opts);
    out.src_positions = at::empty({0}, opts);
    if (nodes.defined()) out.src_nodes = at::empty({0}, opts);
    out.src_offsets.assign(static_cast<size_t>(k) + 1, 0);
    out.edge_offsets.assign(static_cast<size_t>(k) + 1, 0);
    return out;
  }
  // The group offsets go to the device through a pinned buffer (no wait for the device).
  at::Tensor go_pinned = at::empty({k + 1}, opts.device(at::kCPU).pinned_memory(true));
  std::copy(go_host.begin(), go_host.end(), go_pinned.data_ptr<int64_t>());
  const at::Tensor go = go_pinned.to(at::TensorOptions().dtype(at::kLong).device(dst.device()), /*non_blocking=*/true);
  const int64_t* ip = indptr.data_ptr<int64_t>();
  const int64_t* ind = indices.data_ptr<int64_t>();
  const int64_t* dp = dst.data_ptr<int64_t>();
  const int64_t* gp = go.data_ptr<int64_t>();

  at::Tensor deg = at::empty({n}, opts);
  at::Tensor grp = at::empty({n}, opts);
  degree_kernel<<<blocks_for(n), kThreads, 0, stream>>>(ip, dp, gp, k, n, deg.data_ptr<int64_t>(),
                                                        grp.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const at::Tensor cum = at::cumsum(deg, 0);
  // sizes = [eo (k + 1 edge offsets), counts (k distinct sources)]: the one read-back
  at::Tensor sizes = at::zeros({2 * k + 1}, opts);
  int64_t* eo = sizes.data_ptr<int64_t>();
  group_kernel<<<blocks_for(k + 1), kThreads, 0, stream>>>(gp, k, cum.data_ptr<int64_t>(), eo,
                                                           out.sub_indptr.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  at::Tensor map = at::empty({k * num_parent_src * static_cast<int64_t>(sizeof(KeyT))}, opts.dtype(at::kByte));
  map.fill_(0xFF);  // every key at its maximum: "not reached"
  KeyT* mp = reinterpret_cast<KeyT*>(map.data_ptr<uint8_t>());
  mark_kernel<KeyT><<<warp_blocks_for(n), kThreads, 0, stream>>>(
      ip, ind, dp, gp, grp.data_ptr<int64_t>(), deg.data_ptr<int64_t>(), cum.data_ptr<int64_t>(), eo, n,
      num_parent_src, mp, reinterpret_cast<unsigned long long*>(eo + k + 1), out.sub_indptr.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  const at::Tensor host = sizes.to(at::kCPU);  // waits for the kernels above: the one sync
  const int64_t* hs = host.data_ptr<int64_t>();
  out.edge_offsets.assign(hs, hs + k + 1);
  out.src_offsets.assign(static_cast<size_t>(k) + 1, 0);
  for (int64_t g = 0; g < k; ++g) out.src_offsets[g + 1] = out.src_offsets[g] + hs[k + 1 + g];
  const int64_t num_edges = out.edge_offsets[k];
  const int64_t num_src = out.src_offsets[k];

  at::Tensor flags = at::empty({n + num_edges}, opts.dtype(at::kByte));
  flag_kernel<KeyT><<<warp_blocks_for(n), kThreads, 0, stream>>>(
      ip, ind, dp, gp, grp.data_ptr<int64_t>(), deg.data_ptr<int64_t>(), cum.data_ptr<int64_t>(), eo, n,
      num_parent_src, mp, flags.data_ptr<uint8_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const at::Tensor scan = at::cumsum(flags, 0, at::kLong);
  out.src_positions = at::empty({num_src}, opts);
  int64_t* nodes_out = nullptr;
  if (nodes.defined()) {
    out.src_nodes = at::empty({num_src}, opts);
    nodes_out = out.src_nodes.data_ptr<int64_t>();
  }
  assign_kernel<KeyT><<<warp_blocks_for(n), kThreads, 0, stream>>>(
      ip, ind, dp, gp, grp.data_ptr<int64_t>(), deg.data_ptr<int64_t>(), cum.data_ptr<int64_t>(), eo, n,
      num_parent_src, flags.data_ptr<uint8_t>(), scan.data_ptr<int64_t>(),
      nodes.defined() ? nodes.data_ptr<int64_t>() : nullptr, mp, out.src_positions.data_ptr<int64_t>(), nodes_out);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  out.sub_indices = at::empty({num_edges}, opts);
  if (num_edges > 0) {
    edge_kernel<KeyT><<<warp_blocks_for(n), kThreads, 0, stream>>>(
        ip, ind, dp, gp, grp.data_ptr<int64_t>(), deg.data_ptr<int64_t>(), cum.data_ptr<int64_t>(), n,
        num_parent_src, mp, out.sub_indices.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return out;
}

// All groups, in passes of at most kMaxMapEntries map entries (one pass unless K x sources is huge).
Sliced slice_groups(const at::Tensor& indptr_in, const at::Tensor& indices_in, const at::Tensor& dst_in,
                    const std::vector<int64_t>& go, int64_t num_parent_src, const at::Tensor& nodes_in) {
  const at::Tensor indptr = indptr_in.contiguous();
  const at::Tensor indices = indices_in.contiguous();
  const at::Tensor dst = dst_in.contiguous();
  const at::Tensor nodes = nodes_in.defined() ? nodes_in.contiguous() : nodes_in;
  const int64_t k = static_cast<int64_t>(go.size()) - 1;
  // Keys are positions in one group's sequence: below its destinations (at most the parent's) plus
  // its edges (at most the parent's, destinations being distinct within a group).
  const bool small_keys = (indptr.numel() - 1) + indices.numel() < std::numeric_limits<uint32_t>::max();
  const int64_t per_pass = std::max<int64_t>(1, kMaxMapEntries / std::max<int64_t>(num_parent_src, 1));
  auto pass = [&](int64_t g0, int64_t g1) {
    std::vector<int64_t> sub(go.begin() + g0, go.begin() + g1 + 1);
    for (auto& o : sub) o -= go[g0];
    const at::Tensor part = dst.narrow(0, go[g0], go[g1] - go[g0]);
    return small_keys ? slice_pass<uint32_t>(indptr, indices, part, sub, num_parent_src, nodes)
                      : slice_pass<unsigned long long>(indptr, indices, part, sub, num_parent_src, nodes);
  };
  if (k <= per_pass) return pass(0, k);
  std::vector<Sliced> parts;
  for (int64_t g0 = 0; g0 < k; g0 += per_pass) parts.push_back(pass(g0, std::min(k, g0 + per_pass)));
  Sliced out;
  std::vector<at::Tensor> ip, ix, sp, sn;
  out.src_offsets = {0};
  out.edge_offsets = {0};
  for (const Sliced& p : parts) {
    ip.push_back(p.sub_indptr);
    ix.push_back(p.sub_indices);
    sp.push_back(p.src_positions);
    if (nodes.defined()) sn.push_back(p.src_nodes);
    for (size_t g = 1; g < p.src_offsets.size(); ++g) {
      out.src_offsets.push_back(out.src_offsets.back() + p.src_offsets[g] - p.src_offsets[g - 1]);
      out.edge_offsets.push_back(out.edge_offsets.back() + p.edge_offsets[g] - p.edge_offsets[g - 1]);
    }
  }
  out.sub_indptr = at::cat(ip);
  out.sub_indices = at::cat(ix);
  out.src_positions = at::cat(sp);
  if (nodes.defined()) out.src_nodes = at::cat(sn);
  return out;
}

void check_common(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& dst, const char* op) {
  TORCH_CHECK(indptr.scalar_type() == at::kLong && indices.scalar_type() == at::kLong &&
                  dst.scalar_type() == at::kLong,
              op, ": indptr, indices and dst_positions must be int64");
  TORCH_CHECK(indptr.dim() == 1 && indices.dim() == 1 && dst.dim() == 1,
              op, ": indptr, indices and dst_positions must be one-dimensional");
  TORCH_CHECK(indptr.numel() >= 1, op, ": indptr must have at least one entry");
  TORCH_CHECK(indptr.device() == dst.device() && indices.device() == dst.device(),
              op, ": all tensors must be on one device");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> slice_layer_cuda(const at::Tensor& indptr, const at::Tensor& indices,
                                                                const at::Tensor& dst, int64_t num_parent_src) {
  check_common(indptr, indices, dst, "slice_layer");
  TORCH_CHECK(num_parent_src >= indptr.numel() - 1, "slice_layer: num_parent_src (", num_parent_src,
              ") must be >= the parent's destinations (", indptr.numel() - 1, ")");
  const c10::cuda::CUDAGuard guard(dst.device());
  Sliced s = slice_groups(indptr, indices, dst, {0, dst.numel()}, num_parent_src, at::Tensor());
  return {s.sub_indptr, s.sub_indices, s.src_positions};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, std::vector<int64_t>, std::vector<int64_t>>
slice_layer_many_cuda(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& dst,
                      at::IntArrayRef group_offsets, const at::Tensor& parent_src_nodes) {
  check_common(indptr, indices, dst, "slice_layer_many");
  TORCH_CHECK(parent_src_nodes.scalar_type() == at::kLong && parent_src_nodes.dim() == 1,
              "slice_layer_many: parent_src_nodes must be a one-dimensional int64 tensor");
  TORCH_CHECK(parent_src_nodes.device() == dst.device(), "slice_layer_many: all tensors must be on one device");
  const int64_t num_parent_src = parent_src_nodes.numel();
  TORCH_CHECK(num_parent_src >= indptr.numel() - 1, "slice_layer_many: num_parent_src (", num_parent_src,
              ") must be >= the parent's destinations (", indptr.numel() - 1, ")");
  TORCH_CHECK(!group_offsets.empty(), "slice_layer_many: group_offsets must have at least one entry");
  const int64_t k = static_cast<int64_t>(group_offsets.size()) - 1;
  TORCH_CHECK(group_offsets[0] == 0 && group_offsets[k] == dst.numel(),
              "slice_layer_many: group_offsets must run from 0 to ", dst.numel(), ", got ", group_offsets[0], " to ",
              group_offsets[k]);
  for (int64_t g = 0; g < k; ++g) {
    TORCH_CHECK(group_offsets[g] <= group_offsets[g + 1], "slice_layer_many: group_offsets must be non-decreasing");
  }
  const c10::cuda::CUDAGuard guard(dst.device());
  if (k == 0) {
    const at::Tensor none = at::empty({0}, dst.options());
    return {none, none.clone(), none.clone(), none.clone(), std::vector<int64_t>{0}, std::vector<int64_t>{0}};
  }
  Sliced s = slice_groups(indptr, indices, dst, group_offsets.vec(), num_parent_src, parent_src_nodes);
  return {s.sub_indptr, s.sub_indices, s.src_positions, s.src_nodes, std::move(s.src_offsets),
          std::move(s.edge_offsets)};
}

}  // namespace

TORCH_LIBRARY_IMPL(cherry, CUDA, m) {
  m.impl("slice_layer", &slice_layer_cuda);
  m.impl("slice_layer_many", &slice_layer_many_cuda);
}
