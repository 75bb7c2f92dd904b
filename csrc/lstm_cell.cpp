// Schema of the fused LSTM cell backward of one time step (kernel: cpu/lstm_cell.cpp; other devices use
// the ATen reference in cherry/ops/lstm.py).
//
// lstm_cell_backward_(act [n, 4H], c_prev [n, H], tanh_c [n, H], dh [n, H], dc [n, H], has_prev) -> ()
//   act holds the step's gate activations in the order i, f, o, g (sigmoid, sigmoid, sigmoid, tanh);
//   dh is the gradient reaching h_t, dc the gradient reaching c_t from step t + 1 (the carry).
//   In place: act becomes the gradient of the gates' pre-activations, dc the carry into step t - 1
//   (dc_t * f). has_prev = false means c_{t-1} = 0 (the first step; c_prev is not read).
//   All five tensors: same floating dtype, contiguous rows of the given widths.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(cherry, m) {
  m.def("lstm_cell_backward_(Tensor(a!) act, Tensor c_prev, Tensor tanh_c, Tensor dh, Tensor(b!) dc, bool has_prev) -> ()");
}
