// Schema of cherry::cache_gather, the feature cache's row gather (kernels: cpu/cache_gather.cpp,
// cuda/cache_gather.cu; reference and contract: cherry/ops/reference_cache.py).
//
// cache_gather(slot_of [N] int64, cache [C, F], host [N, F], nodes [M] int64) -> out [M, F]:
//   out[i] = cache[slot_of[nodes[i]]] when slot_of[nodes[i]] >= 0 (a hit), else host[nodes[i]] (a miss).
// `slot_of`, `cache`, `nodes` and `out` live on the op's device; on CUDA `host` may be pinned host
// memory, read by the kernel in place through its mapped (UVA, zero-copy) address, so a miss crosses
// the link once, straight into `out`, with no staging copy on the host.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(cherry, m) {
  m.def("cache_gather(Tensor slot_of, Tensor cache, Tensor host, Tensor nodes) -> Tensor");
}
