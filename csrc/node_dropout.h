// The keep rule and argument checks of cherry::node_dropout shared by its CPU and CUDA kernels
// (cpu/node_dropout.cpp, cuda/node_dropout.cu); the schema and contract are in node_dropout.cpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>

#ifdef __CUDACC__
#define CHERRY_HOST_DEVICE __host__ __device__
#else
#define CHERRY_HOST_DEVICE
#endif

namespace cherry {

constexpr int64_t kDropoutWords = int64_t(1) << 32;  // hash words are 32-bit: thresholds lie in [0, 2^32]

// Element (r, j) is kept iff lowbias32(state[r] ^ j) >= threshold: the rule of
// cherry/models/dropout.py (states are 32-bit words held in int64; j < 2^32, so the XOR stays 32-bit).
CHERRY_HOST_DEVICE inline bool dropout_keeps(int64_t state, int64_t column, int64_t threshold) {
  uint32_t x = static_cast<uint32_t>(state) ^ static_cast<uint32_t>(column);
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return static_cast<int64_t>(x) >= threshold;
}

// x [R, F] floating, states [R] int64 on x's device, threshold in [0, 2^32], F < 2^32.
inline void check_node_dropout_args(const at::Tensor& x, const at::Tensor& states, int64_t threshold) {
  TORCH_CHECK(x.dim() == 2 && at::isFloatingType(x.scalar_type()), "node_dropout: x must be a 2-D floating tensor");
  TORCH_CHECK(states.dim() == 1 && states.scalar_type() == at::kLong, "node_dropout: states must be a 1-D int64 tensor");
  TORCH_CHECK(states.numel() == x.size(0), "node_dropout: one state per row of x: ", states.numel(), " states for ",
              x.size(0), " rows");
  TORCH_CHECK(states.device() == x.device(), "node_dropout: states and x must be on one device, got ",
              states.device(), " and ", x.device());
  TORCH_CHECK(threshold >= 0 && threshold <= kDropoutWords, "node_dropout: threshold must lie in [0, 2^32], got ",
              threshold);
  TORCH_CHECK(x.size(1) < kDropoutWords, "node_dropout: rows must be narrower than 2^32, got ", x.size(1));
}

}  // namespace cherry
