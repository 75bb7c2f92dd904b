// CPU kernel of cherry::refine_groups (contract: cherry/ops/reference_planning.py).
//
// Reaches are built per seed with a stamp array over the input positions (stamp[u] == i: u is in
// R(i) already; int32, with each position's relabelling in the same slot), so each seed costs the
// edges of its sampled tree and nothing is sorted; the order
// within a reach does not change any count, hence not the result. Counts live in one dense
// [relabelled nodes x K] int16 (fewer than 2**15 seeds) or int32 array (K <= a few dozen), so a seed's gains for all K groups are one
// pass over its reach with K-wide rows that stay in cache. Sequential by design: each move changes
// the counts the next seed's gain is computed from, and the passes cost milliseconds.
// refine_groups_many builds the reaches once and refines several starts (each under its own cap); the
// caps of one start share its passes until their choices differ (the result of each is unchanged).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <tuple>
#include <vector>

namespace {

constexpr int64_t kAhead = 8;  // seeds whose top-layer rows build_reaches prefetches ahead

// Reach entries hold nodes relabelled in order of first use (which changes no count, hence not the
// result): seeds in locality order then touch nearby count rows, which keeps the passes in cache.
// Entries are int32 (the input positions are checked to fit): half the bytes the passes stream.
struct Reaches {
  std::vector<int64_t> ptr;
  std::vector<int32_t> reach;
  int64_t num_nodes = 0;  // distinct relabelled nodes
};

// R(i) = reach[ptr[i], ptr[i+1]) of every seed (see the contract). The walk is memory-bound (random
// rows of the blocks and random stamps), so the stamp and the label of a position share one 8-byte
// slot (one cache miss serves both), and each seed's entries are relabelled right after its walk,
// while they are still in cache.
Reaches build_reaches(at::TensorList indptrs, at::TensorList indices, const int64_t* seeds, int64_t n,
                      int64_t num_inputs) {
  const int64_t num_layers = static_cast<int64_t>(indptrs.size());
  TORCH_CHECK(num_inputs < INT32_MAX && n < INT32_MAX, "refine_groups: at most 2**31 - 1 inputs and seeds, got ",
              num_inputs, " and ", n);
  Reaches out;
  out.ptr.assign(static_cast<size_t>(n) + 1, 0);
  std::vector<at::Tensor> ips, inds;
  int64_t num_edges = 0;
  for (int64_t l = 0; l < num_layers; ++l) {
    ips.push_back(indptrs[l].contiguous());
    inds.push_back(indices[l].contiguous());
    num_edges += inds[l].numel();
  }
  // a reach is at most the seed's tree: reserving the batch's edges twice over avoids most regrowth
  out.reach.reserve(static_cast<size_t>(n + 2 * num_edges));
  std::vector<int32_t>& reach = out.reach;
  struct Slot {
    int32_t stamp = -1, label = -1;
  };
  std::vector<Slot> slot(static_cast<size_t>(num_inputs));
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
  std::vector<const int64_t*> ip_p, ind_p;  // data_ptr checks its tensor on every call: once per layer
  for (int64_t l = 0; l < num_layers; ++l) {
    ip_p.push_back(ips[l].data_ptr<int64_t>());
    ind_p.push_back(inds[l].data_ptr<int64_t>());
  }
  int32_t next = 0;
  const int64_t* top_ip = ip_p[num_layers - 1];
  const int64_t* top_ind = ind_p[num_layers - 1];
  for (int64_t i = 0; i < n; ++i) {
    // seeds come in locality order, so their top-layer rows are random reads: fetch the rows a few
    // seeds ahead (their indptr entries further ahead); measured 4-6% off a top-layer refinement's
    // call (synth-arxiv, batch 8192, K = 8, cold caches; fetching the rows' second lines too did not help)
    if (i + 2 * kAhead < n) __builtin_prefetch(top_ip + seeds[i + 2 * kAhead]);
    if (i + kAhead < n) __builtin_prefetch(top_ind + top_ip[seeds[i + kAhead]]);
    const int64_t start = static_cast<int64_t>(reach.size());
    const int32_t stamp = static_cast<int32_t>(i);
    const int64_t s = seeds[i];
    slot[s].stamp = stamp;
    reach.push_back(static_cast<int32_t>(s));
    int64_t expanded = 0;  // set at the input layer: entries before it hold positions still to relabel
    for (int64_t l = num_layers - 1; l >= 0; --l) {
      const int64_t* ip = ip_p[l];
      const int64_t* ind = ind_p[l];
      // the top layer (l = num_layers - 1) expands the seed; each lower one everything reached so far
      const int64_t end = static_cast<int64_t>(reach.size());
      expanded = end;
      if (l > 0) {
        for (int64_t r = start; r < end; ++r) {
          const int64_t p = reach[r];
          for (int64_t e = ip[p]; e < ip[p + 1]; ++e) {
            const int64_t u = ind[e];
            if (slot[u].stamp != stamp) {
              slot[u].stamp = stamp;
              reach.push_back(static_cast<int32_t>(u));
            }
          }
        }
        continue;
      }
      // the input layer's new entries are never expanded: relabel them as they are found, while
      // their slot is in cache (a top-layer-only call so relabels all but the seed in one walk)
      for (int64_t r = start; r < end; ++r) {
        const int64_t p = reach[r];
        for (int64_t e = ip[p]; e < ip[p + 1]; ++e) {
          Slot& sl = slot[ind[e]];
          if (sl.stamp != stamp) {
            sl.stamp = stamp;
            if (sl.label < 0) sl.label = next++;
            reach.push_back(sl.label);
          }
        }
      }
    }
    // relabel the expanded entries (the walk read their original positions through the layers)
    for (int64_t r = start; r < expanded; ++r) {
      Slot& sl = slot[reach[r]];
      if (sl.label < 0) sl.label = next++;
      reach[r] = sl.label;
    }
    out.ptr[i + 1] = static_cast<int64_t>(reach.size());
  }
  out.num_nodes = next;
  return out;
}

// Greedy state of one start (or of several caps that have made the same moves so far). C, the count
// type, is int16_t when there are fewer than 2**15 seeds (a count is at most the number of seeds):
// half the bytes per K-wide row, so more of the count array stays in cache; the counts are the same.
template <typename C>
struct State {
  std::vector<C> cnt;  // [num_nodes x K]: seeds of each group whose reach holds the node
  std::vector<int64_t> size, g;
  std::vector<double> total;
  int64_t inputs = 0;  // the objective: nonzero entries of cnt, kept as moves change it by their gain
};

// The state of start ``g`` (every label checked in [0, k) by the caller) whose groups' summed weights
// the caller has already computed (``total``).
template <typename C>
State<C> init_state(const Reaches& rs, int64_t n, std::vector<double> total, int64_t k, const int64_t* g) {
  State<C> st;
  st.cnt.assign(static_cast<size_t>(rs.num_nodes * k), 0);
  st.size.assign(static_cast<size_t>(k), 0);
  st.total = std::move(total);
  st.g.assign(g, g + n);
  for (int64_t i = 0; i < n; ++i) {
    st.size[g[i]] += 1;
    for (int64_t r = rs.ptr[i]; r < rs.ptr[i + 1]; ++r) st.inputs += st.cnt[rs.reach[r] * k + g[i]]++ == 0;
  }
  return st;
}

template <typename C>
void finish(const State<C>& st, int64_t* g_out, int64_t* inputs_out) {
  std::copy(st.g.begin(), st.g.end(), g_out);
  *inputs_out = st.inputs;
}

// The objective of a start that no row refines (only counted): each node's set of groups as a bit
// mask of one word, ORed over the reaches, then counted; a fraction of init_state's nodes x K count
// array and its scan (a K = 8 labelling of 38k top-layer nodes: 38 KB of masks against 608 KB).
template <typename W>
int64_t count_by_mask(const Reaches& rs, int64_t n, const int64_t* g) {
  std::vector<W> mask(static_cast<size_t>(rs.num_nodes), 0);
  for (int64_t i = 0; i < n; ++i) {
    const W bit = static_cast<W>(W{1} << g[i]);
    for (int64_t r = rs.ptr[i]; r < rs.ptr[i + 1]; ++r) mask[rs.reach[r]] |= bit;
  }
  int64_t inputs = 0;
  for (const W m : mask) inputs += __builtin_popcountll(static_cast<unsigned long long>(m));
  return inputs;
}

// (labels checked in [0, k) by the caller)
int64_t count_inputs(const Reaches& rs, int64_t n, int64_t k, const int64_t* g) {
  if (k <= 8) return count_by_mask<uint8_t>(rs, n, g);
  if (k <= 16) return count_by_mask<uint16_t>(rs, n, g);
  if (k <= 32) return count_by_mask<uint32_t>(rs, n, g);
  TORCH_CHECK(k <= 64, "refine_groups: count_inputs takes at most 64 groups, got ", k);
  return count_by_mask<uint64_t>(rs, n, g);
}

// The greedy passes (see the contract) for every cap of ``rows`` at once, from (pass0, i0) with moved0
// moves so far in that pass: the caps share one state and one gain computation per seed while they
// choose the same moves, and fork (a copy of the state each) at the first seed where they choose
// differently, so each cap ends exactly where its own run would. Results go to row v of
// g_out/inputs_out. KC > 0 fixes K at compile time, so the K-wide count loops vectorise (they are
// most of the time).
template <int64_t KC, typename C>
void greedy_impl(const Reaches& rs, int64_t n, const double* w, int64_t k_runtime, State<C>& st, std::vector<int64_t> rows,
                 const double* caps, int64_t num_passes, int64_t pass0, int64_t i0, int64_t moved0, int64_t* g_out,
                 int64_t* inputs_out) {
  const int64_t k = KC > 0 ? KC : k_runtime;
  const std::vector<int64_t>& ptr = rs.ptr;
  const std::vector<int32_t>& reach = rs.reach;
  std::vector<int32_t> add(static_cast<size_t>(k), 0);
  std::vector<int64_t> choice(rows.size());
  auto apply = [&](State<C>& s, int64_t i, int64_t a, int64_t b, int64_t gain) {
    s.inputs -= gain;
    for (int64_t r = ptr[i]; r < ptr[i + 1]; ++r) {
      s.cnt[reach[r] * k + a] -= 1;
      s.cnt[reach[r] * k + b] += 1;
    }
    s.total[a] -= w[i];
    s.total[b] += w[i];
    s.size[a] -= 1;
    s.size[b] += 1;
    s.g[i] = b;
  };
  for (int64_t pass = pass0; pass < num_passes; ++pass) {
    int64_t moved = pass == pass0 ? moved0 : 0;
    for (int64_t i = pass == pass0 ? i0 : 0; i < n; ++i) {
      const int64_t a = st.g[i];
      if (st.size[a] <= 1) continue;
      int64_t lose = 0;
      int32_t* add_p = add.data();
      std::fill(add_p, add_p + k, 0);
      const C* cnt_p = st.cnt.data();
      for (int64_t r = ptr[i]; r < ptr[i + 1]; ++r) {
        const C* row = cnt_p + reach[r] * k;
        lose += row[a] == 1;
        for (int64_t b = 0; b < k; ++b) add_p[b] += row[b] == 0;
      }
      bool same = true;
      for (size_t v = 0; v < rows.size(); ++v) {
        int64_t best = -1, best_gain = 0;
        for (int64_t b = 0; b < k; ++b) {
          if (b != a && lose - add[b] > best_gain && st.total[b] + w[i] <= caps[rows[v]]) {
            best = b;
            best_gain = lose - add[b];
          }
        }
        choice[v] = best;
        same = same && best == choice[0];
      }
      if (!same) {  // fork: every other choice continues on its own copy; the last row's keeps this state
        const int64_t keep = choice[rows.size() - 1];
        std::vector<int64_t> done;
        for (size_t v = 0; v + 1 < rows.size(); ++v) {
          const int64_t c = choice[v];
          if (c == keep || std::find(done.begin(), done.end(), c) != done.end()) continue;
          done.push_back(c);
          std::vector<int64_t> sub;
          for (size_t u = 0; u < rows.size(); ++u)
            if (choice[u] == c) sub.push_back(rows[u]);
          State<C> copy = st;
          if (c >= 0) apply(copy, i, a, c, lose - add[c]);
          greedy_impl<KC, C>(rs, n, w, k, copy, sub, caps, num_passes, pass, i + 1, moved + (c >= 0 ? 1 : 0), g_out,
                          inputs_out);
        }
        std::vector<int64_t> sub;
        for (size_t u = 0; u < rows.size(); ++u)
          if (choice[u] == keep) sub.push_back(rows[u]);
        rows = sub;
        choice.assign(rows.size(), keep);
      }
      const int64_t best = choice[0];
      if (best < 0) continue;
      apply(st, i, a, best, lose - add[best]);
      ++moved;
    }
    if (moved == 0) break;
  }
  for (const int64_t v : rows) finish(st, g_out + v * n, inputs_out + v);
}

template <typename C>
void greedy(const Reaches& rs, int64_t n, const double* w, int64_t k, State<C>& st, const std::vector<int64_t>& rows,
            const double* caps, int64_t num_passes, int64_t* g_out, int64_t* inputs_out) {
  switch (k) {
    case 2: return greedy_impl<2, C>(rs, n, w, k, st, rows, caps, num_passes, 0, 0, 0, g_out, inputs_out);
    case 4: return greedy_impl<4, C>(rs, n, w, k, st, rows, caps, num_passes, 0, 0, 0, g_out, inputs_out);
    case 8: return greedy_impl<8, C>(rs, n, w, k, st, rows, caps, num_passes, 0, 0, 0, g_out, inputs_out);
    case 16: return greedy_impl<16, C>(rs, n, w, k, st, rows, caps, num_passes, 0, 0, 0, g_out, inputs_out);
    case 32: return greedy_impl<32, C>(rs, n, w, k, st, rows, caps, num_passes, 0, 0, 0, g_out, inputs_out);
    default: return greedy_impl<0, C>(rs, n, w, k, st, rows, caps, num_passes, 0, 0, 0, g_out, inputs_out);
  }
}

// Refines every row of the [C, n] starts ``g`` under caps[c] into g_out/inputs_out: rows with equal
// starts run as one cohort (see greedy_impl); a cap below every group's weight plus the lightest seed
// admits no first move, hence none at all, so such a row is only counted (by count_inputs when no row
// of its cohort moves). A cohort's objective is kept as its moves change it, so no result rescans
// the count array.
template <typename C>
void refine_all_as(const Reaches& rs, int64_t n, const double* w, int64_t k, const int64_t* g, int64_t num_rows,
                   const double* caps, int64_t num_passes, int64_t* g_out, int64_t* inputs_out) {
  std::vector<bool> taken(static_cast<size_t>(num_rows), false);
  const double w_min = n > 0 ? *std::min_element(w, w + n) : 0.0;
  for (int64_t c = 0; c < num_rows; ++c) {
    if (taken[c]) continue;
    const int64_t* start = g + c * n;
    std::vector<int64_t> rows;
    for (int64_t d = c; d < num_rows; ++d) {
      if (!taken[d] && std::equal(start, start + n, g + d * n)) {
        taken[d] = true;
        rows.push_back(d);
      }
    }
    // the groups' weights (in seed order, as the greedy updates them): which rows can move
    std::vector<double> total(static_cast<size_t>(k), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      TORCH_CHECK(start[i] >= 0 && start[i] < k, "refine_groups: group ", start[i], " out of range");
      total[start[i]] += w[i];
    }
    const double t_min = *std::min_element(total.begin(), total.end());
    std::vector<int64_t> movable, counted;
    for (const int64_t v : rows) (t_min + w_min <= caps[v] ? movable : counted).push_back(v);
    if (movable.empty() && k <= 64) {  // only counted: a bit mask per node, not the greedy's count array
      const int64_t inputs = count_inputs(rs, n, k, start);
      for (const int64_t v : counted) {
        std::copy(start, start + n, g_out + v * n);
        inputs_out[v] = inputs;
      }
      continue;
    }
    State<C> st = init_state<C>(rs, n, std::move(total), k, start);
    for (const int64_t v : counted) finish(st, g_out + v * n, inputs_out + v);
    if (!movable.empty()) greedy(rs, n, w, k, st, movable, caps, num_passes, g_out, inputs_out);
  }
}

void refine_all(const Reaches& rs, int64_t n, const double* w, int64_t k, const int64_t* g, int64_t num_rows,
                const double* caps, int64_t num_passes, int64_t* g_out, int64_t* inputs_out) {
  if (n <= INT16_MAX) return refine_all_as<int16_t>(rs, n, w, k, g, num_rows, caps, num_passes, g_out, inputs_out);
  refine_all_as<int32_t>(rs, n, w, k, g, num_rows, caps, num_passes, g_out, inputs_out);
}

at::Tensor refine_groups_cpu(at::TensorList indptrs, at::TensorList indices, const at::Tensor& positions,
                             const at::Tensor& groups, const at::Tensor& weights, int64_t num_groups,
                             int64_t num_inputs, double max_group_weight, int64_t num_passes) {
  TORCH_CHECK(indptrs.size() == indices.size() && !indptrs.empty(), "refine_groups: one indptr and indices per layer");
  TORCH_CHECK(num_groups >= 1 && num_inputs >= 1, "refine_groups: num_groups and num_inputs must be >= 1");
  const int64_t n = positions.numel();
  const at::Tensor pos_c = positions.contiguous(), w_c = weights.contiguous();
  const Reaches rs = build_reaches(indptrs, indices, pos_c.data_ptr<int64_t>(), n, num_inputs);
  const at::Tensor start = groups.contiguous();
  at::Tensor out = at::empty_like(start);
  int64_t inputs = 0;
  refine_all(rs, n, w_c.data_ptr<double>(), num_groups, start.data_ptr<int64_t>(), 1, &max_group_weight, num_passes,
             out.data_ptr<int64_t>(), &inputs);
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
  const at::Tensor start = groups.contiguous();
  TORCH_CHECK(start.size(1) == n, "refine_groups_many: groups must have one column per position");
  at::Tensor out = at::empty_like(start);
  at::Tensor inputs = at::empty({groups.size(0)}, positions.options());
  const std::vector<double> caps(max_group_weights.begin(), max_group_weights.end());
  refine_all(rs, n, w_c.data_ptr<double>(), num_groups, start.data_ptr<int64_t>(), start.size(0), caps.data(),
             num_passes, out.data_ptr<int64_t>(), inputs.data_ptr<int64_t>());
  return {out, inputs};
}

}  // namespace

TORCH_LIBRARY_IMPL(cherry, CPU, m) {
  m.impl("refine_groups", &refine_groups_cpu);
  m.impl("refine_groups_many", &refine_groups_many_cpu);
}
