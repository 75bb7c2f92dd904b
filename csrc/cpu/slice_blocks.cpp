// CPU kernels of cherry::slice_layer and cherry::slice_layer_many (contracts:
// cherry/ops/reference_sampling.py). slice_layer is slice_layer_many of one group.
//
// Why it is shaped this way: a micro-batch split is many tiny slices (K groups x L layers, a few
// thousand edges each), so fixed per-call costs dominate. Two thread-local scratch arrays are kept
// between calls: the renumbering map over the parent's sources (first-appearance order), which stays
// -1 between groups because each group resets only the entries it touched (exactly the sources it
// emitted), and the sources buffer, sized by an upper bound that is only known to be loose after
// the fact. So no call clears num_parent_src entries, and the outputs are allocated at their exact
// sizes (a memory tracker or an emulated device capacity sees no slack). Edges are copied and
// renumbered in one fused, branch-free pass. Most of that pass's time is cache misses on the map
// (random over the parent's sources) and on the destinations' rows, so a group is first sliced with
// a 16-bit map (half the footprint of the 32-bit one: measured 25-45% faster on synth-arxiv's input
// layer with cold caches, as in a plan) and only a group with more than 2**15 - 1 sources is redone
// with the wide map. Groups are independent: with several threads and enough edges they run in
// parallel, each writing its sources into its own region of the buffer.
// Per-op ATen headers instead of <ATen/ATen.h>: only at::empty is needed, and it parses faster.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

// Above this many entries a scratch array is not kept between calls (its memory would stay held per
// thread: at most 8 MiB of map and 16 MiB of sources); such a call allocates its own.
constexpr int64_t kMaxRetained = int64_t{1} << 21;
// Below this many edges in a layer (a few ms of work), threads cost more than they save: a group is
// one long task, and on a loaded machine a worker preempted inside it stalls the whole region for a
// scheduler slice (measured: 0.4 ms sequential vs 8 ms median with 2 threads on 70k edges).
constexpr int64_t kParallelEdges = int64_t{1} << 20;

// `size` entries of this thread's scratch array (or of `fallback` when too large to keep). Arrays
// only grow, filled with `fill`; keeping them at `fill` between calls is up to the caller.
template <typename T>
T* scratch(std::vector<T>& kept, int64_t size, std::vector<T>& fallback, T fill) {
  if (size > kMaxRetained) {
    fallback.assign(static_cast<size_t>(size), fill);
    return fallback.data();
  }
  if (static_cast<int64_t>(kept.size()) < size) kept.resize(static_cast<size_t>(size), fill);
  return kept.data();
}

// A map of `size` entries, all -1; the caller must leave every entry it sets back at -1.
template <typename MapT>
MapT* scratch_map(int64_t size, std::vector<MapT>& fallback) {
  thread_local std::vector<MapT> map;
  return scratch<MapT>(map, size, fallback, MapT(-1));
}

int64_t* scratch_sources(int64_t size, std::vector<int64_t>& fallback) {
  thread_local std::vector<int64_t> sources;
  return scratch<int64_t>(sources, size, fallback, 0);
}

// pos[k] = from[k] and, with `nodes`, out_nodes[k] = nodes[from[k]]: the exact-size outputs, with the
// gather of global ids fused in while the positions are in cache (restrict lets the loads overlap).
void emit(const int64_t* __restrict from, int64_t n, int64_t* __restrict pos, const int64_t* __restrict nodes,
          int64_t* __restrict out_nodes) {
  if (nodes == nullptr) {
    std::memcpy(pos, from, sizeof(int64_t) * n);
    return;
  }
  for (int64_t k = 0; k < n; ++k) {
    const int64_t p = from[k];
    pos[k] = p;
    out_nodes[k] = nodes[p];
  }
}

constexpr int64_t kAhead = 16;  // destinations whose rows slice_group prefetches ahead (measured: 8 was 3-4% slower)
constexpr int64_t kPrepassAhead = 32;  // destinations whose indptr entries the sizing pass prefetches ahead

// Out of line, so that the edge loop keeps the index in a register (a check's message would take
// its address, a store per edge).
[[gnu::cold, gnu::noinline]] void out_of_range(int64_t p, int64_t num_parent_src) {
  TORCH_CHECK(false, "slice_layer: parent index ", p, " out of range [0, ", num_parent_src, ")");
}

// Slices the destinations dp[0, n) of one group (its indptr is already written): writes the local
// indices of its edges to `si` and its sources to `src_out`; returns the number of sources, or -1
// when MapT is int16_t and the group has more sources than it numbers (then nothing is kept: the
// caller slices the group again with a wider map). `local` is all -1 on entry and on exit, also
// when a check throws.
template <typename MapT>
int64_t slice_group(const int64_t* __restrict ip, const int64_t* __restrict ind, const int64_t* __restrict dp,
                    int64_t n, int64_t num_parent_src, int64_t* __restrict si, int64_t* __restrict src_out,
                    MapT* __restrict local) {
  constexpr bool kNarrow = sizeof(MapT) == 2;
  constexpr int64_t kMaxCount = std::numeric_limits<MapT>::max();  // ids stay below it
  if (kNarrow && n > kMaxCount) return -1;
  int64_t count = 0;
  try {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t d = dp[i];
      TORCH_CHECK(local[d] < 0, "slice_layer: dst_positions must be distinct within a group, ", d, " repeats");
      local[d] = static_cast<MapT>(count);
      src_out[count++] = d;
    }
    for (int64_t i = 0; i < n; ++i) {
      // the walk is bound by the latency of the destinations' random rows: fetch the rows a few
      // destinations ahead (their indptr entries further ahead, so they are there to find the rows)
      if (i + 2 * kAhead < n) __builtin_prefetch(ip + dp[i + 2 * kAhead]);
      if (i + kAhead < n) {
        // both ends of the row: an average row of eight int64 edges straddles two cache lines,
        // and fetching only the first left the second a miss in the loop below (measured 18% off
        // slicing synth-arxiv's batch of 8192 with cold caches)
        const int64_t q = dp[i + kAhead];
        __builtin_prefetch(ind + ip[q]);
        __builtin_prefetch(ind + ip[q + 1] - 1);
      }
      const int64_t d = dp[i];
      const int64_t end = ip[d + 1];
      if (kNarrow && count + (end - ip[d]) > kMaxCount) {  // this row could overflow the map: give up
        for (int64_t k = 0; k < count; ++k) local[src_out[k]] = MapT(-1);
        return -1;
      }
      for (int64_t e = ip[d]; e < end; ++e) {
        const int64_t p = ind[e];
        if (static_cast<uint64_t>(p) >= static_cast<uint64_t>(num_parent_src)) out_of_range(p, num_parent_src);
        // Branch-free: whether a source is new is data-dependent and unpredictable (most are new in
        // an input layer), so compilers' branches mispredict. `neg` is all ones for an unseen source
        // (-1 in the map); the speculative src_out[count] write needs one spare slot (see `bound`).
        const MapT m = local[p];
        const MapT neg = m >> (8 * sizeof(MapT) - 1);
        const MapT id = m ^ ((m ^ static_cast<MapT>(count)) & neg);
        src_out[count] = p;
        local[p] = id;
        *si++ = id;
        count -= neg;
      }
    }
  } catch (...) {
    for (int64_t k = 0; k < count; ++k) local[src_out[k]] = MapT(-1);
    throw;
  }
  for (int64_t k = 0; k < count; ++k) local[src_out[k]] = MapT(-1);
  return count;
}

// One thread's maps for a run of groups: each group is sliced with the 16-bit map (when tried) and,
// if its sources overflow it, with the wide map (fetched only then). After an overflow the 16-bit map
// is dropped: the groups of one call are of similar sizes, so the rest would overflow too.
template <typename MapT>
struct GroupSlicer {
  int64_t num_parent_src;
  int16_t* narrow = nullptr;
  MapT* wide = nullptr;
  std::vector<int16_t> narrow_fallback;
  std::vector<MapT> wide_fallback;

  GroupSlicer(int64_t num_parent_src_, bool try_narrow) : num_parent_src(num_parent_src_) {
    if (try_narrow) narrow = scratch_map<int16_t>(num_parent_src, narrow_fallback);
  }

  int64_t operator()(const int64_t* ip, const int64_t* ind, const int64_t* dp, int64_t n, int64_t* si,
                     int64_t* src_out) {
    if (narrow != nullptr) {
      const int64_t count = slice_group<int16_t>(ip, ind, dp, n, num_parent_src, si, src_out, narrow);
      if (count >= 0) return count;
      narrow = nullptr;
    }
    if (wide == nullptr) wide = scratch_map<MapT>(num_parent_src, wide_fallback);
    return slice_group<MapT>(ip, ind, dp, n, num_parent_src, si, src_out, wide);
  }
};

struct Sliced {
  at::Tensor sub_indptr, sub_indices, src_positions, src_nodes;
  std::vector<int64_t> src_offsets, edge_offsets;
};

// The shared body: K groups at offsets go[0..K] (go[0] == 0, non-decreasing, go[K] == numel(dst)).
// With `nodes` (the parent's num_parent_src global source ids) also gathers src_nodes.
template <typename MapT>
Sliced slice_many(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& dst, const int64_t* go,
                  int64_t num_groups, int64_t num_parent_src, const int64_t* nodes) {
  const int64_t num_parent_dst = indptr.numel() - 1;
  // a 16-bit map is worth trying only where a group may have fewer than 2**15 sources
  const bool try_narrow = sizeof(MapT) > 2 && num_groups > 0 && dst.numel() / num_groups < INT16_MAX;
  const int64_t* ip = indptr.data_ptr<int64_t>();
  const int64_t* ind = indices.data_ptr<int64_t>();
  const int64_t* dp = dst.data_ptr<int64_t>();
  const auto opts = indptr.options();
  const int64_t num_dst = dst.numel();

  Sliced out;
  out.sub_indptr = at::empty({num_dst + num_groups}, opts);
  out.edge_offsets.assign(static_cast<size_t>(num_groups) + 1, 0);
  out.src_offsets.assign(static_cast<size_t>(num_groups) + 1, 0);
  int64_t* sp = out.sub_indptr.data_ptr<int64_t>();
  int64_t* eo = out.edge_offsets.data();
  int64_t* so = out.src_offsets.data();
  // Per group: its indptr (range-checking every destination before any map entry is touched), its
  // edge offset, and an upper bound of its sources plus the spare slot slice_group writes into (its
  // region of the sources buffer when groups run in parallel).
  std::vector<int64_t> bound(static_cast<size_t>(num_groups) + 1, 0);
  eo[0] = 0;
  for (int64_t g = 0; g < num_groups; ++g) {
    int64_t* gp = sp + go[g] + g;
    gp[0] = 0;
    for (int64_t i = go[g]; i < go[g + 1]; ++i) {
      // the destinations' indptr entries are random reads: fetch them well ahead (measured 3-4%
      // off both layers' slicing with cold caches; the walk below then finds them in cache)
      if (i + kPrepassAhead < go[g + 1]) __builtin_prefetch(ip + dp[i + kPrepassAhead]);
      const int64_t d = dp[i];
      TORCH_CHECK(d >= 0 && d < num_parent_dst, "slice_layer: dst position ", d, " out of range [0, ",
                  num_parent_dst, ")");
      gp[i - go[g] + 1] = gp[i - go[g]] + (ip[d + 1] - ip[d]);
    }
    const int64_t n = go[g + 1] - go[g];
    eo[g + 1] = eo[g] + gp[n];
    bound[g + 1] = bound[g] + std::min(n + gp[n], num_parent_src) + 1;
  }
  const int64_t num_edges = eo[num_groups];
  out.sub_indices = at::empty({num_edges}, opts);
  int64_t* si = out.sub_indices.data_ptr<int64_t>();
  std::vector<int64_t> sources_fallback;
  int64_t* sr = scratch_sources(bound[num_groups], sources_fallback);

  // Group g's sources land at sr + start[g]: packed when sequential, at bound[g] when parallel.
  std::vector<int64_t> start(static_cast<size_t>(num_groups) + 1, 0);
  so[0] = 0;
  if (num_groups > 1 && num_edges >= kParallelEdges && at::get_num_threads() > 1) {
    std::vector<int64_t> counts(static_cast<size_t>(num_groups));
    at::parallel_for(0, num_groups, 1, [&](int64_t begin, int64_t end) {
      GroupSlicer<MapT> slice(num_parent_src, try_narrow);
      for (int64_t g = begin; g < end; ++g) {
        counts[g] = slice(ip, ind, dp + go[g], go[g + 1] - go[g], si + eo[g], sr + bound[g]);
      }
    });
    for (int64_t g = 0; g < num_groups; ++g) {
      start[g] = bound[g];
      so[g + 1] = so[g] + counts[g];
    }
  } else {
    GroupSlicer<MapT> slice(num_parent_src, try_narrow);
    for (int64_t g = 0; g < num_groups; ++g) {
      start[g] = so[g];
      so[g + 1] = so[g] + slice(ip, ind, dp + go[g], go[g + 1] - go[g], si + eo[g], sr + so[g]);
    }
  }
  const int64_t num_src = so[num_groups];
  out.src_positions = at::empty({num_src}, opts);
  int64_t* pos = out.src_positions.data_ptr<int64_t>();
  int64_t* out_nodes = nullptr;
  if (nodes != nullptr) {
    out.src_nodes = at::empty({num_src}, opts);
    out_nodes = out.src_nodes.data_ptr<int64_t>();
  }
  for (int64_t g = 0; g < num_groups; ++g) {
    emit(sr + start[g], so[g + 1] - so[g], pos + so[g], nodes, out_nodes == nullptr ? nullptr : out_nodes + so[g]);
  }
  return out;
}

void check_inputs(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& dst,
                  int64_t num_parent_src) {
  TORCH_CHECK(indptr.scalar_type() == at::kLong && indices.scalar_type() == at::kLong &&
                  dst.scalar_type() == at::kLong,
              "slice_layer: indptr, indices and dst_positions must be int64");
  TORCH_CHECK(indptr.dim() == 1 && indices.dim() == 1 && dst.dim() == 1,
              "slice_layer: indptr, indices and dst_positions must be one-dimensional");
  TORCH_CHECK(indptr.numel() >= 1, "slice_layer: indptr must have at least one entry");
  TORCH_CHECK(num_parent_src >= indptr.numel() - 1, "slice_layer: num_parent_src (", num_parent_src,
              ") must be >= the parent's destinations (", indptr.numel() - 1, ")");
}

Sliced dispatch(const at::Tensor& indptr_in, const at::Tensor& indices_in, const at::Tensor& dst_in,
                const int64_t* go, int64_t num_groups, int64_t num_parent_src, const int64_t* nodes) {
  const at::Tensor indptr = indptr_in.contiguous();
  const at::Tensor indices = indices_in.contiguous();
  const at::Tensor dst = dst_in.contiguous();
  // Local indices of one group are below num_parent_src, so a 32-bit wide map suffices for any real
  // block and halves the scratch's cache footprint (and groups are tried with a 16-bit map first).
  if (num_parent_src <= std::numeric_limits<int32_t>::max()) {
    return slice_many<int32_t>(indptr, indices, dst, go, num_groups, num_parent_src, nodes);
  }
  return slice_many<int64_t>(indptr, indices, dst, go, num_groups, num_parent_src, nodes);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> slice_layer_cpu(const at::Tensor& indptr, const at::Tensor& indices,
                                                               const at::Tensor& dst, int64_t num_parent_src) {
  check_inputs(indptr, indices, dst, num_parent_src);
  const int64_t go[2] = {0, dst.numel()};
  Sliced s = dispatch(indptr, indices, dst, go, 1, num_parent_src, nullptr);
  return {s.sub_indptr, s.sub_indices, s.src_positions};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, std::vector<int64_t>, std::vector<int64_t>>
slice_layer_many_cpu(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& dst,
                     at::IntArrayRef group_offsets, const at::Tensor& parent_src_nodes_in) {
  TORCH_CHECK(parent_src_nodes_in.scalar_type() == at::kLong && parent_src_nodes_in.dim() == 1,
              "slice_layer_many: parent_src_nodes must be a one-dimensional int64 tensor");
  const int64_t num_parent_src = parent_src_nodes_in.numel();
  check_inputs(indptr, indices, dst, num_parent_src);
  TORCH_CHECK(!group_offsets.empty(), "slice_layer_many: group_offsets must have at least one entry");
  const int64_t* go = group_offsets.data();
  const int64_t num_groups = static_cast<int64_t>(group_offsets.size()) - 1;
  TORCH_CHECK(go[0] == 0 && go[num_groups] == dst.numel(), "slice_layer_many: group_offsets must run from 0 to ",
              dst.numel(), ", got ", go[0], " to ", go[num_groups]);
  for (int64_t g = 0; g < num_groups; ++g) {
    TORCH_CHECK(go[g] <= go[g + 1], "slice_layer_many: group_offsets must be non-decreasing");
  }
  const at::Tensor parent_src_nodes = parent_src_nodes_in.contiguous();
  Sliced s = dispatch(indptr, indices, dst, go, num_groups, num_parent_src, parent_src_nodes.data_ptr<int64_t>());
  return {s.sub_indptr, s.sub_indices, s.src_positions, s.src_nodes, std::move(s.src_offsets),
          std::move(s.edge_offsets)};
}

}  // namespace

TORCH_LIBRARY_IMPL(cherry, CPU, m) {
  m.impl("slice_layer", &slice_layer_cpu);
  m.impl("slice_layer_many", &slice_layer_many_cpu);
}
