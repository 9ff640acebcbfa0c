// Fused RNN cell kernels of the simulated accelerator (PrivateUse1).
//
// ATen's LSTM/GRU cells call _thnn_fused_lstm_cell / _thnn_fused_gru_cell
// for every CUDA, XPU and PrivateUse1 input (aten/src/ATen/native/RNN.cpp),
// and ATen has those kernels for CUDA only, so nn.LSTM / nn.GRU need them
// here, like the real plug-ins provide their own (torch_npu registers
// _thnn_fused_gru_cell and its own LSTM kernels).
//
// Same contracts as aten/src/ATen/native/cuda/RNN.cu: the forward returns
// the workspace the backward reads (LSTM: the activated gates i, f, g, o;
// GRU: r, z, n, hx, and the hidden new-gate including its bias); undefined
// incoming gradients count as zero; grad_bias is the batch sum of the
// gate gradients. Math runs on CPU tensors aliasing the device memory, in
// float for reduced-precision inputs (the CUDA accumulate type).

#include "sim_accel.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace sim_accel {
namespace {

using at::Tensor;

at::ScalarType compute_type(const Tensor& t) {
  return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// The CPU value of an optional device tensor in `type` (undefined stays undefined).
Tensor cpu_in(const c10::optional<Tensor>& t, at::ScalarType type) {
  if (!t.has_value() || !t->defined()) {
    return Tensor();
  }
  return alias_cpu(*t).to(type);
}

Tensor back(const Tensor& cpu, const Tensor& like) {
  if (!cpu.defined()) {
    return cpu;
  }
  return cpu.to(like.scalar_type()).to(like.device()).contiguous();
}

std::tuple<Tensor, Tensor, Tensor> fused_lstm_cell(
    const Tensor& input_gates,
    const Tensor& hidden_gates,
    const Tensor& cx,
    const c10::optional<Tensor>& input_bias,
    const c10::optional<Tensor>& hidden_bias) {
  const c10::DeviceGuard guard(input_gates.device());
  const auto type = compute_type(input_gates);
  Tensor gates = cpu_in(input_gates, type) + cpu_in(hidden_gates, type);
  const Tensor ib = cpu_in(input_bias, type);
  const Tensor hb = cpu_in(hidden_bias, type);
  if (ib.defined()) {
    gates = gates + ib + hb;
  }
  auto chunks = gates.chunk(4, 1);
  const Tensor i = chunks[0].sigmoid();
  const Tensor f = chunks[1].sigmoid();
  const Tensor g = chunks[2].tanh();
  const Tensor o = chunks[3].sigmoid();
  const Tensor cy = f * cpu_in(cx, type) + i * g;
  const Tensor hy = o * cy.tanh();
  const Tensor workspace = at::cat({i, f, g, o}, 1);
  return {back(hy, cx), back(cy, cx), back(workspace, input_gates)};
}

std::tuple<Tensor, Tensor, Tensor> fused_lstm_cell_backward_impl(
    const c10::optional<Tensor>& grad_hy,
    const c10::optional<Tensor>& grad_cy,
    const Tensor& cx,
    const Tensor& cy,
    const Tensor& workspace,
    bool has_bias) {
  const c10::DeviceGuard guard(workspace.device());
  const auto type = compute_type(workspace);
  const Tensor ws = cpu_in(workspace, type);
  auto chunks = ws.chunk(4, 1);
  const Tensor &i = chunks[0], &f = chunks[1], &g = chunks[2], &o = chunks[3];
  const Tensor c_prev = cpu_in(cx, type);
  const Tensor tanh_cy = cpu_in(cy, type).tanh();
  Tensor ghy = cpu_in(grad_hy, type);
  Tensor gcy = cpu_in(grad_cy, type);
  if (!ghy.defined()) {
    ghy = at::zeros_like(c_prev);
  }
  if (!gcy.defined()) {
    gcy = at::zeros_like(c_prev);
  }
  const Tensor gc = ghy * o * (1 - tanh_cy * tanh_cy) + gcy;
  const Tensor gi = gc * g * (1 - i) * i;
  const Tensor gf = gc * c_prev * (1 - f) * f;
  const Tensor gg = gc * i * (1 - g * g);
  const Tensor go = ghy * tanh_cy * (1 - o) * o;
  const Tensor grad_gates = at::cat({gi, gf, gg, go}, 1);
  const Tensor grad_cx = gc * f;
  const Tensor grad_bias = has_bias ? grad_gates.sum(0) : Tensor();
  return {back(grad_gates, workspace), back(grad_cx, cx), back(grad_bias, workspace)};
}

std::tuple<Tensor, Tensor> fused_gru_cell(
    const Tensor& input_gates,
    const Tensor& hidden_gates,
    const Tensor& hx,
    const c10::optional<Tensor>& input_bias,
    const c10::optional<Tensor>& hidden_bias) {
  const c10::DeviceGuard guard(input_gates.device());
  const auto type = compute_type(input_gates);
  Tensor ig = cpu_in(input_gates, type);
  Tensor hg = cpu_in(hidden_gates, type);
  const Tensor ib = cpu_in(input_bias, type);
  const Tensor hb = cpu_in(hidden_bias, type);
  if (ib.defined()) {
    ig = ig + ib;
    hg = hg + hb;
  }
  auto ic = ig.chunk(3, 1);
  auto hc = hg.chunk(3, 1);
  const Tensor r = (ic[0] + hc[0]).sigmoid();
  const Tensor z = (ic[1] + hc[1]).sigmoid();
  const Tensor hn = hc[2];
  const Tensor n = (ic[2] + r * hn).tanh();
  const Tensor h_prev = cpu_in(hx, type);
  const Tensor hy = n + z * (h_prev - n);
  const Tensor workspace = at::cat({r, z, n, h_prev, hn}, 1);
  return {back(hy, hx), back(workspace, input_gates)};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> fused_gru_cell_backward(
    const Tensor& grad_hy,
    const Tensor& workspace,
    bool has_bias) {
  const c10::DeviceGuard guard(workspace.device());
  const auto type = compute_type(workspace);
  auto chunks = cpu_in(workspace, type).chunk(5, 1);
  const Tensor &r = chunks[0], &z = chunks[1], &n = chunks[2], &h_prev = chunks[3], &hn = chunks[4];
  const Tensor go = cpu_in(grad_hy, type);
  const Tensor gz = go * (h_prev - n) * (1 - z) * z;
  const Tensor grad_hx = go * z;
  const Tensor gn = go * (1 - z) * (1 - n * n);
  const Tensor ghn = gn * r;
  const Tensor gr = gn * hn * (1 - r) * r;
  const Tensor grad_input_gates = at::cat({gr, gz, gn}, 1);
  const Tensor grad_hidden_gates = at::cat({gr, gz, ghn}, 1);
  const Tensor gib = has_bias ? grad_input_gates.sum(0) : Tensor();
  const Tensor ghb = has_bias ? grad_hidden_gates.sum(0) : Tensor();
  return {back(grad_input_gates, workspace), back(grad_hidden_gates, workspace), back(grad_hx, grad_hy),
          back(gib, workspace), back(ghb, workspace)};
}

}  // namespace
}  // namespace sim_accel

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace sim_accel;
  m.impl("_thnn_fused_lstm_cell", &fused_lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", &fused_lstm_cell_backward_impl);
  m.impl("_thnn_fused_gru_cell", &fused_gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", &fused_gru_cell_backward);
}
