// CPU kernel of lstm_cell_backward_ (schema and contract: csrc/lstm_cell.cpp).
//
// One pass over the step's rows replaces about ten ATen element-wise ops (each a pass over memory);
// the arithmetic has no transcendental function, so the inner loop over units vectorises. Parallel
// over rows: each row is read and written by one task only.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

namespace cherry {
namespace {

void check_rows(const at::Tensor& t, int64_t rows, int64_t width, const char* name, const at::Tensor& like) {
  TORCH_CHECK(t.dim() == 2 && t.size(0) == rows && t.size(1) == width, name, " must be [", rows, ", ", width,
              "], got ", t.sizes());
  TORCH_CHECK(t.scalar_type() == like.scalar_type() && t.device() == like.device(), name,
              " must have act's dtype and device");
  TORCH_CHECK(t.stride(1) == 1 && t.stride(0) == width, name, " must be contiguous");
}

template <typename scalar_t>
void cell_backward(scalar_t* act, const scalar_t* c_prev, const scalar_t* tanh_c, const scalar_t* dh, scalar_t* dc,
                   int64_t rows, int64_t hidden, bool has_prev) {
  at::parallel_for(0, rows, std::max<int64_t>(1, at::internal::GRAIN_SIZE / (4 * hidden)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      scalar_t* a = act + r * 4 * hidden;
      const scalar_t* cp = c_prev + r * hidden;
      const scalar_t* tc = tanh_c + r * hidden;
      const scalar_t* gh = dh + r * hidden;
      scalar_t* gc = dc + r * hidden;
      scalar_t* ai = a;
      scalar_t* af = a + hidden;
      scalar_t* ao = a + 2 * hidden;
      scalar_t* ag = a + 3 * hidden;
      for (int64_t j = 0; j < hidden; ++j) {
        const scalar_t i = ai[j], f = af[j], o = ao[j], g = ag[j], t = tc[j], d_h = gh[j];
        const scalar_t d_c = gc[j] + d_h * o * (scalar_t(1) - t * t);
        const scalar_t cprev = has_prev ? cp[j] : scalar_t(0);
        ai[j] = d_c * g * i * (scalar_t(1) - i);
        af[j] = d_c * cprev * f * (scalar_t(1) - f);
        ao[j] = d_h * t * o * (scalar_t(1) - o);
        ag[j] = d_c * i * (scalar_t(1) - g * g);
        gc[j] = d_c * f;
      }
    }
  });
}

void lstm_cell_backward_cpu(at::Tensor act, const at::Tensor& c_prev, const at::Tensor& tanh_c, const at::Tensor& dh,
                            at::Tensor dc, bool has_prev) {
  TORCH_CHECK(act.dim() == 2 && act.size(1) % 4 == 0, "act must be [n, 4H], got ", act.sizes());
  TORCH_CHECK(act.is_floating_point(), "act must be floating");
  const int64_t rows = act.size(0), hidden = act.size(1) / 4;
  check_rows(act, rows, 4 * hidden, "act", act);
  check_rows(tanh_c, rows, hidden, "tanh_c", act);
  check_rows(dh, rows, hidden, "dh", act);
  check_rows(dc, rows, hidden, "dc", act);
  if (has_prev) check_rows(c_prev, rows, hidden, "c_prev", act);
  AT_DISPATCH_FLOATING_TYPES(act.scalar_type(), "lstm_cell_backward_", [&] {
    cell_backward<scalar_t>(act.data_ptr<scalar_t>(), has_prev ? c_prev.data_ptr<scalar_t>() : nullptr,
                            tanh_c.data_ptr<scalar_t>(), dh.data_ptr<scalar_t>(), dc.data_ptr<scalar_t>(), rows,
                            hidden, has_prev);
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(cherry, CPU, m) { m.impl("lstm_cell_backward_", &lstm_cell_backward_cpu); }

}  // namespace cherry
