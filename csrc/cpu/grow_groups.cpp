// CPU kernels of cherry::grow_groups and cherry::group_shapes (contract: cherry/ops/reference_planning.py).
//
// grow_groups: the holders of each top-layer source (the seeds whose one-hop reach holds it) are an
// inverted index built by a counting sort, so a group's growth costs the holders of the sources it
// covers; over all groups that is at most K times the top layer's edges. The frontier is a binary
// heap of packed (score, -order position) keys with lazy deletion (an entry is live while its seed is
// unassigned and its score unchanged): the pick is exactly the reference's max-score, lowest-position.
// group_shapes: one stamp array over the input positions (stamp[u] == g: u is in group g's current
// frontier); a group's frontier only grows downwards, so each layer's sources extend its destinations.
// The walk is bound by the latency of random rows of the blocks: the stamps are int32 (half the
// cache footprint) and the rows of frontier entries a few ahead are prefetched.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cstdint>
#include <queue>
#include <vector>

namespace {

constexpr int64_t kAhead = 8;  // frontier entries whose rows group_shapes prefetches ahead

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

at::Tensor group_shapes_cpu(at::TensorList indptrs, at::TensorList indices, const at::Tensor& positions,
                            const at::Tensor& groups, int64_t num_groups) {
  TORCH_CHECK(indptrs.size() == indices.size() && !indptrs.empty(), "group_shapes: one indptr and indices per layer");
  const int64_t num_layers = static_cast<int64_t>(indptrs.size());
  const int64_t n = positions.numel();
  const int64_t k = num_groups;
  std::vector<at::Tensor> ips, inds;
  int64_t num_inputs = 1;
  for (int64_t l = 0; l < num_layers; ++l) {
    ips.push_back(indptrs[l].contiguous());
    inds.push_back(indices[l].contiguous());
  }
  num_inputs = std::max<int64_t>(ips[0].numel() - 1, 1);
  {
    const int64_t* ind0 = inds[0].data_ptr<int64_t>();  // once: data_ptr checks its tensor on every call
    for (int64_t e = 0; e < inds[0].numel(); ++e) num_inputs = std::max(num_inputs, ind0[e] + 1);
  }
  const at::Tensor pos_c = positions.contiguous(), grp_c = groups.contiguous();
  const int64_t* pos = pos_c.data_ptr<int64_t>();
  const int64_t* grp = grp_c.data_ptr<int64_t>();
  std::vector<int64_t> gptr(static_cast<size_t>(k) + 1, 0), members(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(grp[i] >= 0 && grp[i] < k, "group_shapes: group ", grp[i], " out of range");
    gptr[grp[i] + 1] += 1;
  }
  for (int64_t g = 0; g < k; ++g) gptr[g + 1] += gptr[g];
  {
    std::vector<int64_t> fill(gptr.begin(), gptr.end() - 1);
    for (int64_t i = 0; i < n; ++i) members[fill[grp[i]]++] = pos[i];
  }
  at::Tensor out = at::zeros({k, num_layers, 3}, positions.options());
  int64_t* o = out.data_ptr<int64_t>();
  TORCH_CHECK(num_inputs < INT32_MAX && k < INT32_MAX, "group_shapes: at most 2**31 - 1 inputs and groups");
  std::vector<int32_t> stamp(static_cast<size_t>(num_inputs), -1);
  std::vector<int64_t> frontier;
  frontier.reserve(static_cast<size_t>(num_inputs));
  for (int64_t g = 0; g < k; ++g) {
    const int32_t gs = static_cast<int32_t>(g);
    frontier.clear();
    for (int64_t m = gptr[g]; m < gptr[g + 1]; ++m) {
      const int64_t p = members[m];
      if (stamp[p] != gs) stamp[p] = gs, frontier.push_back(p);
    }
    for (int64_t l = num_layers - 1; l >= 0; --l) {
      const int64_t* ip = ips[l].data_ptr<int64_t>();
      const int64_t* ind = inds[l].data_ptr<int64_t>();
      const int64_t num_dst = static_cast<int64_t>(frontier.size()), layer_dst = ips[l].numel() - 1;
      for (int64_t f = 0; f < num_dst; ++f) {
        const int64_t p = frontier[f];
        TORCH_CHECK(p >= 0 && p < layer_dst, "group_shapes: node ", p, " is not a destination of layer ", l);
      }
      int64_t edges = 0;
      for (int64_t f = 0; f < num_dst; ++f) {
        // the walk is bound by the latency of random rows: fetch the rows of frontier entries ahead
        // (their indptr entry further ahead, so its value is there when their indices are fetched)
        if (f + 2 * kAhead < num_dst) __builtin_prefetch(ip + frontier[f + 2 * kAhead]);
        if (f + kAhead < num_dst) __builtin_prefetch(ind + ip[frontier[f + kAhead]]);
        const int64_t p = frontier[f];
        edges += ip[p + 1] - ip[p];
        for (int64_t e = ip[p]; e < ip[p + 1]; ++e) {
          const int64_t u = ind[e];
          if (stamp[u] != gs) stamp[u] = gs, frontier.push_back(u);
        }
      }
      int64_t* row = o + (g * num_layers + l) * 3;
      row[0] = static_cast<int64_t>(frontier.size());
      row[1] = num_dst;
      row[2] = edges;
    }
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(cherry, CPU, m) {
  m.impl("grow_groups", &grow_groups_cpu);
  m.impl("group_shapes", &group_shapes_cpu);
}
