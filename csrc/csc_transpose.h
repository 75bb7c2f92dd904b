// The transposed adjacency of a CSC segmentation, shared by the CPU backward kernels that scatter into
// source rows (csr_aggregate, attention_aggregate): rather than atomics or per-thread [S, F] buffers,
// they walk each source's in-edges, so the backward is parallel over source rows without write races.
#pragma once

#include <ATen/ATen.h>

namespace cherry {

// For source s, ptr[s]..ptr[s+1] index edge (edge positions, increasing) and dst (their destinations).
struct Transposed {
  at::Tensor ptr, edge, dst;
};

// Sequential stable counting sort: O(S + E) time, 2E + S + 1 int64. Checks every index is in [0, num_src).
inline Transposed transpose_csc(const at::Tensor& indptr, const at::Tensor& indices, int64_t num_src) {
  const int64_t num_dst = indptr.numel() - 1, num_edges = indices.numel();
  const int64_t* ptr = indptr.data_ptr<int64_t>();
  const int64_t* idx = indices.data_ptr<int64_t>();
  Transposed t{at::zeros({num_src + 1}, indptr.options()), at::empty({num_edges}, indptr.options()),
               at::empty({num_edges}, indptr.options())};
  int64_t* tp = t.ptr.data_ptr<int64_t>();
  for (int64_t e = 0; e < num_edges; ++e) {
    TORCH_CHECK(idx[e] >= 0 && idx[e] < num_src, "indices[", e, "] = ", idx[e], " is outside [0, ", num_src, ")");
    ++tp[idx[e] + 1];
  }
  for (int64_t s = 0; s < num_src; ++s) tp[s + 1] += tp[s];
  auto cursor = t.ptr.narrow(0, 0, num_src).clone();
  int64_t* cur = cursor.data_ptr<int64_t>();
  int64_t* te = t.edge.data_ptr<int64_t>();
  int64_t* td = t.dst.data_ptr<int64_t>();
  for (int64_t d = 0; d < num_dst; ++d) {
    for (int64_t e = ptr[d]; e < ptr[d + 1]; ++e) {
      const int64_t pos = cur[idx[e]]++;
      te[pos] = e;
      td[pos] = d;
    }
  }
  return t;
}

// O(D) check that indptr is a valid segmentation of the E edges; the kernels index memory with it.
inline void check_csc_segments(const at::Tensor& indptr, int64_t num_edges) {
  const int64_t* ptr = indptr.data_ptr<int64_t>();
  const int64_t num_dst = indptr.numel() - 1;
  TORCH_CHECK(ptr[0] == 0 && ptr[num_dst] == num_edges, "indptr must start at 0 and end at the number of edges ",
              num_edges, ", got ", ptr[0], " and ", ptr[num_dst]);
  for (int64_t d = 0; d < num_dst; ++d) {
    TORCH_CHECK(ptr[d] <= ptr[d + 1], "indptr must be non-decreasing, but indptr[", d, "] > indptr[", d + 1, "]");
  }
}

}  // namespace cherry
