// CPU kernel of cherry::grow_groups (contract: cherry/ops/reference_planning.py; group_shapes: group_shapes.cpp).
//
// grow_groups: the holders of each top-layer source (the seeds whose one-hop reach holds it) are an
// inverted index built by a counting sort, so a group's growth costs the holders of the sources it
// covers; over all groups that is at most K times the top layer's edges. The frontier is a binary
// heap of packed (score, -order position) keys with lazy deletion (an entry is live while its seed is
// unassigned and its score unchanged): the pick is exactly the reference's max-score, lowest-position.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cstdint>
#include <queue>
#include <vector>

namespace {

at::Tensor grow_groups_cpu(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& order,
                           const at::Tensor& weights, int64_t num_groups) {
  const int64_t n = order.numel();
  const int64_t k = num_groups;
  TORCH_CHECK(k >= 1 && k <= n, "grow_groups: num_groups must be in [1, ", n, "], got ", k);
  const at::Tensor ip_c = indptr.contiguous(), ind_c = indices.contiguous(), ord_c = order.contiguous(),
                   w_c = weights.contiguous();
  const int64_t* ip = ip_c.data_ptr<int64_t>();
  const int64_t* ind = ind_c.data_ptr<int64_t>();
  const int64_t* pos = ord_c.data_ptr<int64_t>();
  const double* w = w_c.data_ptr<double>();
  const int64_t num_dst = ip_c.numel() - 1;
  int64_t num_src = num_dst;
  for (int64_t e = 0; e < ind_c.numel(); ++e) num_src = std::max(num_src, ind[e] + 1);

  // Distinct one-hop reaches R(i) = {p_i} + in-neighbours of p_i, then the holders of each source.
  std::vector<int64_t> rptr(static_cast<size_t>(n) + 1, 0), reach, stamp(static_cast<size_t>(num_src), -1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = pos[i];
    TORCH_CHECK(p >= 0 && p < num_dst, "grow_groups: position ", p, " is not a destination of the block");
    stamp[p] = i;
    reach.push_back(p);
    for (int64_t e = ip[p]; e < ip[p + 1]; ++e) {
      const int64_t u = ind[e];
      if (stamp[u] != i) stamp[u] = i, reach.push_back(u);
    }
    rptr[i + 1] = static_cast<int64_t>(reach.size());
  }
  std::vector<int64_t> hptr(static_cast<size_t>(num_src) + 1, 0), holders(reach.size());
  for (const int64_t u : reach) hptr[u + 1] += 1;
  for (int64_t u = 0; u < num_src; ++u) hptr[u + 1] += hptr[u];
  {
    std::vector<int64_t> fill(hptr.begin(), hptr.end() - 1);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t r = rptr[i]; r < rptr[i + 1]; ++r) holders[fill[reach[r]]++] = i;
  }

  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += w[i];
  const double target = total / static_cast<double>(k);
  at::Tensor out = at::empty({n}, order.options());
  int64_t* label = out.data_ptr<int64_t>();
  std::fill(label, label + n, -1);
  std::vector<int64_t> covered(static_cast<size_t>(num_src), -1), score(static_cast<size_t>(n), 0),
      score_group(static_cast<size_t>(n), -1);
  int64_t cursor = 0, left = n;
  for (int64_t g = 0; g < k; ++g) {
    std::priority_queue<uint64_t> heap;  // (score << 32) | (2^32 - 1 - i): max score, then lowest i
    double weight = 0.0;
    while (left > 0) {
      int64_t i = -1;
      while (!heap.empty()) {
        const uint64_t top = heap.top();
        const int64_t j = static_cast<int64_t>(0xffffffffULL - (top & 0xffffffffULL));
        const int64_t s = static_cast<int64_t>(top >> 32);
        heap.pop();
        if (label[j] < 0 && score_group[j] == g && score[j] == s) {
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
          heap.push((static_cast<uint64_t>(score[j]) << 32) | (0xffffffffULL - static_cast<uint64_t>(j)));
        }
      }
      // stop at the target, but leave a seed for each later group; the last group takes the rest
      if (g < k - 1 && (weight >= target || left == k - 1 - g)) break;
    }
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(cherry, CPU, m) {
  m.impl("grow_groups", &grow_groups_cpu);
}
