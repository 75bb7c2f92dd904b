// CUDA kernels of cherry::grow_groups, cherry::group_shapes and cherry::group_shapes_many (contract:
// cherry/ops/reference_planning.py).
//
// grow_groups: the one-hop reaches and their holders (the inverted index) are built with ATen ops on
// (seed, source) keys made unique and sorted; the order within a reach or a holder list changes no
// score, hence not the result. The growth is sequential by definition (each pick changes the next
// one's scores), so one thread runs it with a binary heap in global memory of packed (score,
// -position) keys and lazy deletion, as the CPU kernel does: the result is the CPU's.
// group_shapes: per layer, (group, node) keys made unique give each group's frontier; counts are
// bincounts over the groups (integer sums, exact); group_shapes_many stacks it per row, with the input
// count the caller passes in (group_shapes reads back the input layer's highest index instead).
#include <ATen/core/Tensor.h>
#include <ATen/ops/_unique2.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/bincount.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <vector>

namespace {

// (owner, node) pairs of each owner's sources in one layer, unique, sorted by owner then node.
std::pair<at::Tensor, at::Tensor> expand(const at::Tensor& ip, const at::Tensor& ind, const at::Tensor& owner,
                                         const at::Tensor& node, int64_t num_nodes, at::Tensor* edges) {
  const auto opts = node.options();
  const at::Tensor start = ip.index_select(0, node);
  const at::Tensor deg = ip.index_select(0, node.add(1)).sub(start);
  if (edges != nullptr) *edges = deg;
  const at::Tensor seg = at::repeat_interleave(at::arange(node.numel(), opts), deg);
  const at::Tensor first = at::cumsum(deg, 0).sub(deg).index_select(0, seg);
  const at::Tensor offs = at::arange(seg.numel(), opts).sub(first);
  const at::Tensor fresh = ind.index_select(0, start.index_select(0, seg).add(offs));
  const at::Tensor keys = at::cat({owner.mul(num_nodes).add(node), owner.index_select(0, seg).mul(num_nodes).add(fresh)});
  const at::Tensor uniq = std::get<0>(at::_unique2(keys, /*sorted=*/true, false, false));
  return {uniq.div(num_nodes, "floor"), uniq.remainder(num_nodes)};
}

__device__ void heap_push(unsigned long long* heap, int64_t& size, unsigned long long key) {
  int64_t c = size++;
  while (c > 0) {
    const int64_t p = (c - 1) / 2;
    if (heap[p] >= key) break;
    heap[c] = heap[p];
    c = p;
  }
  heap[c] = key;
}

__device__ unsigned long long heap_pop(unsigned long long* heap, int64_t& size) {
  const unsigned long long top = heap[0];
  const unsigned long long last = heap[--size];
  int64_t c = 0;
  while (true) {
    int64_t child = 2 * c + 1;
    if (child >= size) break;
    if (child + 1 < size && heap[child + 1] > heap[child]) ++child;
    if (heap[child] <= last) break;
    heap[c] = heap[child];
    c = child;
  }
  if (size > 0) heap[c] = last;
  return top;
}

__global__ void grow_kernel(const int64_t* rptr, const int64_t* reach, const int64_t* hptr, const int64_t* holders,
                            const double* w, int64_t n, int64_t k, int64_t* label, int64_t* covered, int64_t* score,
                            int64_t* score_group, unsigned long long* heap) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += w[i], label[i] = -1;
  const double target = total / static_cast<double>(k);
  int64_t cursor = 0, left = n;
  for (int64_t g = 0; g < k; ++g) {
    int64_t size = 0;
    double weight = 0.0;
    while (left > 0) {
      int64_t i = -1;
      while (size > 0) {
        const unsigned long long top = heap_pop(heap, size);
        const int64_t j = static_cast<int64_t>(0xffffffffULL - (top & 0xffffffffULL));
        if (label[j] < 0 && score_group[j] == g && score[j] == static_cast<int64_t>(top >> 32)) {
          i = j;
          break;
        }
      }
      if (i < 0) {
        while (label[cursor] >= 0) ++cursor;
        i = cursor;
      }
      label[i] = g;
      weight += w[i];
      left -= 1;
      for (int64_t r = rptr[i]; r < rptr[i + 1]; ++r) {
        const int64_t u = reach[r];
        if (covered[u] == g) continue;
        covered[u] = g;
        for (int64_t h = hptr[u]; h < hptr[u + 1]; ++h) {
          const int64_t j = holders[h];
          if (label[j] >= 0) continue;
          if (score_group[j] != g) score_group[j] = g, score[j] = 0;
          score[j] += 1;
          heap_push(heap, size, (static_cast<unsigned long long>(score[j]) << 32) |
                                    (0xffffffffULL - static_cast<unsigned long long>(j)));
        }
      }
      if (g < k - 1 && (weight >= target || left == k - 1 - g)) break;
    }
  }
}

at::Tensor grow_groups_cuda(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& order,
                            const at::Tensor& weights, int64_t num_groups) {
  const int64_t n = order.numel();
  const int64_t k = num_groups;
  TORCH_CHECK(k >= 1 && k <= n, "grow_groups: num_groups must be in [1, ", n, "], got ", k);
  const c10::cuda::CUDAGuard guard(order.device());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const auto opts = order.options();
  const at::Tensor ip = indptr.contiguous(), ind = indices.contiguous(), pos = order.contiguous();
  const int64_t num_src = std::max<int64_t>(ip.numel() - 1, ind.numel() ? ind.max().item<int64_t>() + 1 : 0);
  const auto [owner, node] = expand(ip, ind, at::arange(n, opts), pos, num_src, nullptr);
  at::Tensor rptr = at::zeros({n + 1}, opts);
  rptr.slice(0, 1).copy_(at::cumsum(at::bincount(owner, {}, n), 0));
  // holders: the reach entries sorted by source, then seed
  const at::Tensor by_node = std::get<0>(at::_unique2(node.mul(n).add(owner), /*sorted=*/true, false, false));
  const at::Tensor holders = by_node.remainder(n);
  at::Tensor hptr = at::zeros({num_src + 1}, opts);
  hptr.slice(0, 1).copy_(at::cumsum(at::bincount(by_node.div(n, "floor"), {}, num_src), 0));
  at::Tensor label = at::empty({n}, opts);
  at::Tensor covered = at::full({std::max<int64_t>(num_src, 1)}, -1, opts);
  at::Tensor score = at::zeros({n}, opts), score_group = at::full({n}, -1, opts);
  at::Tensor heap = at::empty({std::max<int64_t>(node.numel(), 1)}, opts);  // pushes per group <= entries
  const at::Tensor w = weights.contiguous();
  grow_kernel<<<1, 1, 0, stream>>>(rptr.data_ptr<int64_t>(), node.data_ptr<int64_t>(), hptr.data_ptr<int64_t>(),
                                   holders.data_ptr<int64_t>(), w.data_ptr<double>(), n, k, label.data_ptr<int64_t>(),
                                   covered.data_ptr<int64_t>(), score.data_ptr<int64_t>(),
                                   score_group.data_ptr<int64_t>(),
                                   reinterpret_cast<unsigned long long*>(heap.data_ptr<int64_t>()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return label;
}

// One labelling's shapes when the positions lie in [0, num_inputs).
at::Tensor shapes_cuda(at::TensorList indptrs, at::TensorList indices, const at::Tensor& positions,
                       const at::Tensor& groups, int64_t num_groups, int64_t num_inputs) {
  const int64_t num_layers = static_cast<int64_t>(indptrs.size());
  const int64_t k = num_groups;
  const at::Tensor keys = std::get<0>(at::_unique2(groups.contiguous().mul(num_inputs).add(positions.contiguous()),
                                                   /*sorted=*/true, false, false));
  at::Tensor owner = keys.div(num_inputs, "floor"), node = keys.remainder(num_inputs);
  std::vector<at::Tensor> rows(static_cast<size_t>(num_layers));
  for (int64_t l = num_layers - 1; l >= 0; --l) {
    at::Tensor deg;
    const at::Tensor num_dst = at::bincount(owner, {}, k);
    auto next = expand(indptrs[l].contiguous(), indices[l].contiguous(), owner, node, num_inputs, &deg);
    const at::Tensor edges = at::bincount(owner, deg.to(at::kDouble), k).to(at::kLong);
    owner = next.first;
    node = next.second;
    rows[l] = at::stack({at::bincount(owner, {}, k), num_dst, edges}, 1);
  }
  return at::stack(rows, 1);
}

at::Tensor group_shapes_cuda(at::TensorList indptrs, at::TensorList indices, const at::Tensor& positions,
                             const at::Tensor& groups, int64_t num_groups) {
  TORCH_CHECK(indptrs.size() == indices.size() && !indptrs.empty(), "group_shapes: one indptr and indices per layer");
  const c10::cuda::CUDAGuard guard(positions.device());
  const at::Tensor ip0 = indptrs[0].contiguous(), ind0 = indices[0].contiguous();
  const int64_t num_inputs =
      std::max<int64_t>({ip0.numel() - 1, ind0.numel() ? ind0.max().item<int64_t>() + 1 : 0, int64_t{1}});
  return shapes_cuda(indptrs, indices, positions, groups, num_groups, num_inputs);
}

at::Tensor group_shapes_many_cuda(at::TensorList indptrs, at::TensorList indices, const at::Tensor& positions,
                                  const at::Tensor& groups, int64_t num_groups, int64_t num_inputs) {
  TORCH_CHECK(groups.dim() == 2, "group_shapes_many: groups must be [C, n]");
  TORCH_CHECK(indptrs.size() == indices.size() && !indptrs.empty(), "group_shapes: one indptr and indices per layer");
  const c10::cuda::CUDAGuard guard(positions.device());
  std::vector<at::Tensor> rows;
  for (int64_t c = 0; c < groups.size(0); ++c) {
    rows.push_back(shapes_cuda(indptrs, indices, positions, groups.select(0, c), num_groups, num_inputs));
  }
  return at::stack(rows, 0);
}

}  // namespace

TORCH_LIBRARY_IMPL(cherry, CUDA, m) {
  m.impl("grow_groups", &grow_groups_cuda);
  m.impl("group_shapes", &group_shapes_cuda);
  m.impl("group_shapes_many", &group_shapes_many_cuda);
}
