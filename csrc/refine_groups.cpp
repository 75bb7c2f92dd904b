// Schema of cherry::refine_groups: greedy moves of seeds between micro-batch groups that lower the
// input-layer redundancy (the summed distinct input nodes of the groups) under a weight cap.
// Kernels: cpu/refine_groups.cpp, cuda/refine_groups.cu. Contract: cherry/ops/reference_planning.py.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(cherry, m) {
  m.def(
      "refine_groups(Tensor[] indptrs, Tensor[] indices, Tensor positions, Tensor groups, Tensor weights, "
      "int num_groups, int num_inputs, float max_group_weight, int num_passes) -> Tensor");
  // C starts (groups [C, n]) refined on one build of the reaches; also each result's summed inputs.
  m.def(
      "refine_groups_many(Tensor[] indptrs, Tensor[] indices, Tensor positions, Tensor groups, Tensor weights, "
      "int num_groups, int num_inputs, float[] max_group_weights, int num_passes) -> (Tensor, Tensor)");
}
