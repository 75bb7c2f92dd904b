// CPU kernel of cache_gather (schema and contract: csrc/cache_gather.cpp).
//
// Parallel over output rows; each row is one memcpy of F elements from the cache (a hit) or the host
// table (a miss), so any dtype is copied bit for bit. Every index is checked before any copy: the
// kernel addresses raw memory with them.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../cache_gather.h"

#include <algorithm>
#include <cstring>

namespace cherry {
namespace {

at::Tensor cache_gather_cpu(const at::Tensor& slot_of, const at::Tensor& cache, const at::Tensor& host,
                            const at::Tensor& nodes) {
  check_cache_gather_args(slot_of, cache, host, nodes);
  const auto slot_c = slot_of.contiguous();
  const auto nodes_c = nodes.contiguous();
  const auto cache_c = cache.contiguous();
  const auto host_c = host.contiguous();
  const int64_t m = nodes_c.numel(), num_rows = host_c.size(0), num_slots = cache_c.size(0);
  const int64_t* node = nodes_c.data_ptr<int64_t>();
  const int64_t* slot = slot_c.data_ptr<int64_t>();
  for (int64_t i = 0; i < m; ++i) {
    TORCH_CHECK(node[i] >= 0 && node[i] < num_rows, "nodes[", i, "] = ", node[i], " is outside [0, ", num_rows, ")");
    TORCH_CHECK(slot[node[i]] < num_slots, "slot_of[", node[i], "] = ", slot[node[i]], " is outside the cache's ",
                num_slots, " rows");
  }
  auto out = at::empty({m, host_c.size(1)}, host_c.options());
  const int64_t row_bytes = host_c.size(1) * host_c.element_size();
  if (m == 0 || row_bytes == 0) return out;
  const char* cache_p = static_cast<const char*>(cache_c.data_ptr());
  const char* host_p = static_cast<const char*>(host_c.data_ptr());
  char* out_p = static_cast<char*>(out.data_ptr());
  const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(row_bytes, 1));
  at::parallel_for(0, m, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t s = slot[node[i]];
      const char* src = s >= 0 ? cache_p + s * row_bytes : host_p + node[i] * row_bytes;
      std::memcpy(out_p + i * row_bytes, src, row_bytes);
    }
  });
  return out;
}

}  // namespace
}  // namespace cherry

TORCH_LIBRARY_IMPL(cherry, CPU, m) {
  m.impl("cache_gather", &cherry::cache_gather_cpu);
}
