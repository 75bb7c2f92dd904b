// CUDA kernel of cache_gather (schema and contract: csrc/cache_gather.cpp).
//
// One warp-row of threads per output row (blockDim = 32 x 8: eight rows per block), the 32 lanes
// striding over the row in 4-byte words when every row starts 4-byte aligned, else in bytes. A hit
// reads the device cache; a miss reads `host` where it lies: device memory, or pinned host memory
// through its mapped device address (cudaHostGetDevicePointer: UVA / zero-copy), so a miss is one
// read over the link straight into `out`, issued on the current stream (the caller's prefetch
// stream), with no host-side staging copy and no host sync. Indices are trusted here: the public
// wrapper (cherry/ops/feature_cache.py) checks them, and the executor builds them itself.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include "../cache_gather.h"

#include <cstdint>

namespace cherry {
namespace {

template <typename Word>
__global__ void cache_gather_kernel(const int64_t* __restrict__ slot_of, const Word* __restrict__ cache,
                                    const Word* __restrict__ host, const int64_t* __restrict__ nodes,
                                    Word* __restrict__ out, int64_t num_out, int64_t row_words) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  if (row >= num_out) return;
  const int64_t node = nodes[row];
  const int64_t slot = slot_of[node];
  const Word* src = slot >= 0 ? cache + slot * row_words : host + node * row_words;
  Word* dst = out + row * row_words;
  for (int64_t j = threadIdx.x; j < row_words; j += blockDim.x) dst[j] = src[j];
}

const void* mapped_pointer(const at::Tensor& host) {
  if (host.is_cuda()) return host.data_ptr();
  TORCH_CHECK(host.is_pinned(), "cache_gather: on CUDA, host must be a CUDA tensor or pinned host memory "
              "(read through its mapped address), got unpinned host memory");
  void* mapped = nullptr;
  C10_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, host.data_ptr(), 0));
  return mapped;
}

at::Tensor cache_gather_cuda(const at::Tensor& slot_of, const at::Tensor& cache, const at::Tensor& host,
                             const at::Tensor& nodes) {
  TORCH_CHECK(slot_of.is_cuda() && cache.is_cuda() && nodes.is_cuda(),
              "cache_gather: slot_of, cache and nodes must be CUDA tensors");
  check_cache_gather_args(slot_of, cache, host, nodes);
  TORCH_CHECK(host.is_contiguous(), "cache_gather: host must be contiguous (it is read in place)");
  const c10::cuda::CUDAGuard guard(cache.device());
  const auto slot_c = slot_of.contiguous();
  const auto nodes_c = nodes.contiguous();
  const auto cache_c = cache.contiguous();
  const int64_t m = nodes_c.numel();
  auto out = at::empty({m, host.size(1)}, cache_c.options());
  const int64_t row_bytes = host.size(1) * host.element_size();
  if (m == 0 || row_bytes == 0) return out;
  const char* host_p = static_cast<const char*>(mapped_pointer(host));
  const char* cache_p = static_cast<const char*>(cache_c.data_ptr());
  char* out_p = static_cast<char*>(out.data_ptr());
  const dim3 threads(32, 8);
  const dim3 blocks(static_cast<unsigned int>((m + threads.y - 1) / threads.y));
  auto stream = c10::cuda::getCurrentCUDAStream();
  const bool words = row_bytes % 4 == 0 && reinterpret_cast<uintptr_t>(host_p) % 4 == 0 &&
                     reinterpret_cast<uintptr_t>(cache_p) % 4 == 0;
  if (words) {
    cache_gather_kernel<uint32_t><<<blocks, threads, 0, stream>>>(
        slot_c.data_ptr<int64_t>(), reinterpret_cast<const uint32_t*>(cache_p),
        reinterpret_cast<const uint32_t*>(host_p), nodes_c.data_ptr<int64_t>(), reinterpret_cast<uint32_t*>(out_p),
        m, row_bytes / 4);
  } else {
    cache_gather_kernel<uint8_t><<<blocks, threads, 0, stream>>>(
        slot_c.data_ptr<int64_t>(), reinterpret_cast<const uint8_t*>(cache_p),
        reinterpret_cast<const uint8_t*>(host_p), nodes_c.data_ptr<int64_t>(), reinterpret_cast<uint8_t*>(out_p),
        m, row_bytes);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace
}  // namespace cherry

TORCH_LIBRARY_IMPL(cherry, CUDA, m) {
  m.impl("cache_gather", &cherry::cache_gather_cuda);
}
