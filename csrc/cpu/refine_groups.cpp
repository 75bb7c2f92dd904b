// CPU kernel of cherry::refine_groups (contract: cherry/ops/reference_planning.py).
//
// Reaches are built per seed with a stamp array over the input positions (stamp[u] == i: u is in
// R(i) already), so each seed costs the edges of its sampled tree and nothing is sorted; the order
// within a reach does not change any count, hence not the result. Counts live in one dense
// [num_inputs x K] int32 array (K <= a few dozen), so a seed's gains for all K groups are one
// pass over its reach with K-wide rows that stay in cache. Sequential by design: each move changes
// the counts the next seed's gain is computed from, and the passes cost milliseconds.
// refine_groups_many builds the reaches once and refines several starts (each under its own cap).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cstdint>
#include <tuple>
#include <vector>

namespace {

// Reach entries hold nodes relabelled in order of first use (which changes no count, hence not the
// result): seeds in locality order then touch nearby count rows, which keeps the passes in cache.
struct Reaches {
  std::vector<int64_t> ptr, reach;
  int64_t num_nodes = 0;  // distinct relabelled nodes
};

// R(i) = reach[ptr[i], ptr[i+1]) of every seed (see the contract).
Reaches build_reaches(at::TensorList indptrs, at::TensorList indices, const int64_t* seeds, int64_t n,
                      int64_t num_inputs) {
  const int64_t num_layers = static_cast<int64_t>(indptrs.size());
  Reaches out;
  out.ptr.assign(static_cast<size_t>(n) + 1, 0);
  out.reach.reserve(static_cast<size_t>(n) * 16);
  std::vector<int64_t>& reach = out.reach;
  std::vector<int64_t> stamp(static_cast<size_t>(num_inputs), -1), label(static_cast<size_t>(num_inputs), -1);
  std::vector<at::Tensor> ips, inds;
  for (int64_t l = 0; l < num_layers; ++l) {
    ips.push_back(indptrs[l].contiguous());
    inds.push_back(indices[l].contiguous());
  }
  // Bounds once per layer, so the walk below runs without checks: layer l's sources are the
  // destinations of layer l - 1 (the inputs for l = 0), and every reached node is such a source.
  for (int64_t l = 0; l < num_layers; ++l) {
    const int64_t num_src = l == 0 ? num_inputs : ips[l - 1].numel() - 1;
    TORCH_CHECK(ips[l].numel() - 1 <= num_src, "refine_groups: layer ", l, " has more destinations than sources");
    const int64_t* ind = inds[l].data_ptr<int64_t>();
    for (int64_t e = 0; e < inds[l].numel(); ++e)
      TORCH_CHECK(static_cast<uint64_t>(ind[e]) < static_cast<uint64_t>(num_src), "refine_groups: index ", ind[e],
                  " out of range");
  }
  const int64_t num_seeds = ips[num_layers - 1].numel() - 1;
  for (int64_t i = 0; i < n; ++i)
    TORCH_CHECK(seeds[i] >= 0 && seeds[i] < num_seeds, "refine_groups: position ", seeds[i], " out of range");
  for (int64_t i = 0; i < n; ++i) {
    const int64_t start = static_cast<int64_t>(reach.size());
    const int64_t s = seeds[i];
    stamp[s] = i;
    reach.push_back(s);
    for (int64_t l = num_layers - 1; l >= 0; --l) {
      const int64_t* ip = ips[l].data_ptr<int64_t>();
      const int64_t* ind = inds[l].data_ptr<int64_t>();
      const int64_t end = static_cast<int64_t>(reach.size());
      for (int64_t r = start; r < end; ++r) {
        const int64_t p = reach[r];
        for (int64_t e = ip[p]; e < ip[p + 1]; ++e) {
          const int64_t u = ind[e];
          if (stamp[u] != i) {
            stamp[u] = i;
            reach.push_back(u);
          }
        }
      }
    }
    out.ptr[i + 1] = static_cast<int64_t>(reach.size());
  }
  // relabel after the walk (the walk reads the original positions through the layers)
  for (int64_t& u : reach) {
    if (label[u] < 0) label[u] = out.num_nodes++;
    u = label[u];
  }
  return out;
}

// The greedy passes on the assignment g (in place); returns the summed distinct inputs of the groups.
// KC > 0 fixes K at compile time, so the K-wide count loops vectorise (they are most of the time).
template <int64_t KC>
int64_t greedy_impl(const Reaches& rs, int64_t n, const double* w, int64_t k_runtime, int64_t num_inputs,
                    double max_group_weight, int64_t num_passes, int64_t* g) {
  const int64_t k = KC > 0 ? KC : k_runtime;
  const std::vector<int64_t>& ptr = rs.ptr;
  const std::vector<int64_t>& reach = rs.reach;
  std::vector<int32_t> cnt(static_cast<size_t>(rs.num_nodes * k), 0);
  std::vector<int64_t> size(static_cast<size_t>(k), 0);
  std::vector<int32_t> add(static_cast<size_t>(k), 0);
  std::vector<double> total(static_cast<size_t>(k), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(g[i] >= 0 && g[i] < k, "refine_groups: group ", g[i], " out of range");
    size[g[i]] += 1;
    total[g[i]] += w[i];
    for (int64_t r = ptr[i]; r < ptr[i + 1]; ++r) cnt[reach[r] * k + g[i]] += 1;
  }
  for (int64_t pass = 0; pass < num_passes; ++pass) {
    int64_t moved = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t a = g[i];
      if (size[a] <= 1) continue;
      int64_t lose = 0;
      int32_t* add_p = add.data();
      std::fill(add_p, add_p + k, 0);
      const int32_t* cnt_p = cnt.data();
      for (int64_t r = ptr[i]; r < ptr[i + 1]; ++r) {
        const int32_t* row = cnt_p + reach[r] * k;
        lose += row[a] == 1;
        for (int64_t b = 0; b < k; ++b) add_p[b] += row[b] == 0;
      }
      int64_t best = -1, best_gain = 0;
      for (int64_t b = 0; b < k; ++b) {
        if (b != a && lose - add[b] > best_gain && total[b] + w[i] <= max_group_weight) {
          best = b;
          best_gain = lose - add[b];
        }
      }
      if (best < 0) continue;
      for (int64_t r = ptr[i]; r < ptr[i + 1]; ++r) {
        cnt[reach[r] * k + a] -= 1;
        cnt[reach[r] * k + best] += 1;
      }
      total[a] -= w[i];
      total[best] += w[i];
      size[a] -= 1;
      size[best] += 1;
      g[i] = best;
      ++moved;
    }
    if (moved == 0) break;
  }
  int64_t inputs = 0;
  for (const int32_t c : cnt) inputs += c > 0;
  return inputs;
}

int64_t greedy(const Reaches& rs, int64_t n, const double* w, int64_t k, int64_t num_inputs, double max_group_weight,
               int64_t num_passes, int64_t* g) {
  switch (k) {
    case 2: return greedy_impl<2>(rs, n, w, k, num_inputs, max_group_weight, num_passes, g);
    case 4: return greedy_impl<4>(rs, n, w, k, num_inputs, max_group_weight, num_passes, g);
    case 8: return greedy_impl<8>(rs, n, w, k, num_inputs, max_group_weight, num_passes, g);
    case 16: return greedy_impl<16>(rs, n, w, k, num_inputs, max_group_weight, num_passes, g);
    case 32: return greedy_impl<32>(rs, n, w, k, num_inputs, max_group_weight, num_passes, g);
    default: return greedy_impl<0>(rs, n, w, k, num_inputs, max_group_weight, num_passes, g);
  }
}

at::Tensor refine_groups_cpu(at::TensorList indptrs, at::TensorList indices, const at::Tensor& positions,
                             const at::Tensor& groups, const at::Tensor& weights, int64_t num_groups,
                             int64_t num_inputs, double max_group_weight, int64_t num_passes) {
  TORCH_CHECK(indptrs.size() == indices.size() && !indptrs.empty(), "refine_groups: one indptr and indices per layer");
  TORCH_CHECK(num_groups >= 1 && num_inputs >= 1, "refine_groups: num_groups and num_inputs must be >= 1");
  const int64_t n = positions.numel();
  const at::Tensor pos_c = positions.contiguous(), w_c = weights.contiguous();
  const Reaches rs = build_reaches(indptrs, indices, pos_c.data_ptr<int64_t>(), n, num_inputs);
  at::Tensor out = groups.contiguous().clone();
  greedy(rs, n, w_c.data_ptr<double>(), num_groups, num_inputs, max_group_weight, num_passes, out.data_ptr<int64_t>());
  return out;
}

std::tuple<at::Tensor, at::Tensor> refine_groups_many_cpu(at::TensorList indptrs, at::TensorList indices,
                                                          const at::Tensor& positions, const at::Tensor& groups,
                                                          const at::Tensor& weights, int64_t num_groups,
                                                          int64_t num_inputs, at::ArrayRef<double> max_group_weights,
                                                          int64_t num_passes) {
  TORCH_CHECK(indptrs.size() == indices.size() && !indptrs.empty(), "refine_groups_many: one indptr and indices per layer");
  TORCH_CHECK(num_groups >= 1 && num_inputs >= 1, "refine_groups_many: num_groups and num_inputs must be >= 1");
  TORCH_CHECK(groups.dim() == 2 && groups.size(0) == static_cast<int64_t>(max_group_weights.size()),
              "refine_groups_many: groups must be [C, n] with one cap per row");
  const int64_t n = positions.numel();
  const at::Tensor pos_c = positions.contiguous(), w_c = weights.contiguous();
  const Reaches rs = build_reaches(indptrs, indices, pos_c.data_ptr<int64_t>(), n, num_inputs);
  at::Tensor out = groups.contiguous().clone();
  at::Tensor inputs = at::empty({groups.size(0)}, positions.options());
  for (int64_t c = 0; c < groups.size(0); ++c) {
    inputs.data_ptr<int64_t>()[c] = greedy(rs, n, w_c.data_ptr<double>(), num_groups, num_inputs,
                                           max_group_weights[c], num_passes, out.data_ptr<int64_t>() + c * n);
  }
  return {out, inputs};
}

}  // namespace

TORCH_LIBRARY_IMPL(cherry, CPU, m) {
  m.impl("refine_groups", &refine_groups_cpu);
  m.impl("refine_groups_many", &refine_groups_many_cpu);
}
