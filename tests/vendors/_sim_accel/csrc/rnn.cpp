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
// float for reduced-precision inputs (the CUDA accumulate type). nn.LSTM itself takes the whole-layer
// kernel below where the CPU does.

#include "sim_accel.h"
#include "strict.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/ops/lstm_native.h>
#include <ATen/ops/mkldnn_rnn_layer.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
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
  return cpu_result_to_device(cpu.to(like.scalar_type()).contiguous(), like.device());
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

// ------------------------------------------------------------ whole-sequence LSTM
// torch_npu registers lstm.input (and lstm.data, gru.input) itself: an Ascend LSTM runs as one kernel per
// layer, not as ATen's loop of per-step matmuls and fused cells that a device without such a kernel gets
// (CUDA has cuDNN's). The stand-in runs what the CPU runs for nn.LSTM: oneDNN's whole-layer kernel
// (mkldnn_rnn_layer, with its autograd formula), layer by layer as aten/src/ATen/native/mkldnn/RNN.cpp's
// mkldnn_rnn does, on the device tensors (the layer kernel and its backward are the CPU's on aliases). Same
// results as the CPU's nn.LSTM, and its speed. Where the CPU itself would not take that kernel (other
// dtypes, projections, autocast active, oneDNN off) ATen's composite runs, as before.

bool whole_layer_lstm_applies(const Tensor& input, at::TensorList hx, at::TensorList params, bool has_biases,
                              int64_t num_layers, bool bidirectional) {
  if (!at::globalContext().userEnabledMkldnn() || !at::hasMKLDNN()) {
    return false;
  }
  if (c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::AutocastPrivateUse1)) {
    return false;  // autocast casts the per-step matmuls and cells: keep that path
  }
  if (input.dim() != 3 || input.numel() == 0 || input.scalar_type() != at::kFloat || hx.size() != 2) {
    return false;
  }
  const int64_t per_layer = has_biases ? 4 : 2;
  if (static_cast<int64_t>(params.size()) != num_layers * (bidirectional ? 2 : 1) * per_layer) {
    return false;  // projections (proj_size) add a weight per layer
  }
  if (hx[0].dim() != 3 || hx[1].dim() != 3 || hx[0].size(2) != hx[1].size(2)) {
    return false;
  }
  auto on_device = [&](const Tensor& t) {
    return t.defined() && t.device() == input.device() && t.scalar_type() == at::kFloat &&
        t.layout() == c10::Layout::Strided;
  };
  if (!input.device().is_privateuseone() || !on_device(input) || !on_device(hx[0]) || !on_device(hx[1])) {
    return false;
  }
  for (const Tensor& p : params) {
    if (!on_device(p)) {
      return false;
    }
  }
  return true;
}

std::tuple<Tensor, Tensor, Tensor> lstm_on_device(
    const Tensor& input_,
    at::TensorList hx_,
    at::TensorList params,
    bool has_biases,
    int64_t num_layers,
    double dropout_p,
    bool train,
    bool bidirectional,
    bool batch_first) {
  if (!whole_layer_lstm_applies(input_, hx_, params, has_biases, num_layers, bidirectional)) {
    return at::native::lstm(input_, hx_, params, has_biases, num_layers, dropout_p, train, bidirectional,
                            batch_first);
  }
  constexpr int64_t kLstmMode = 2;  // ideep::rnn_kind::LSTM
  const int64_t stride = has_biases ? 4 : 2;
  const int64_t directions = bidirectional ? 2 : 1;
  const int64_t hidden_size = hx_[0].size(2);
  Tensor layer_input = (batch_first ? input_.transpose(0, 1) : input_).contiguous();
  const Tensor hx = hx_[0].contiguous();
  const Tensor cx = hx_[1].contiguous();
  std::vector<Tensor> layer_hy(num_layers * directions);
  std::vector<Tensor> layer_cy(num_layers * directions);
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    std::vector<Tensor> layer_output(directions);
    for (int64_t direction = 0; direction < directions; ++direction) {
      const int64_t index = layer * directions + direction;
      const Tensor& w0 = params[index * stride];
      const Tensor& w1 = params[index * stride + 1];
      const Tensor w2 = has_biases ? params[index * stride + 2] : at::zeros(w0.sizes(), w0.options());
      const Tensor w3 = has_biases ? params[index * stride + 3] : at::zeros(w1.sizes(), w1.options());
      auto outputs = at::mkldnn_rnn_layer(
          layer_input, w0, w1, w2, w3, hx[index], cx[index], /*reverse=*/direction > 0, /*batch_sizes=*/{},
          kLstmMode, hidden_size, num_layers, has_biases, bidirectional, batch_first, train);
      layer_output[direction] = std::get<0>(outputs);
      layer_hy[index] = std::get<1>(outputs);
      layer_cy[index] = std::get<2>(outputs);
    }
    layer_input = directions == 1 ? layer_output[0] : at::cat(layer_output, -1);
    if (dropout_p != 0 && train && layer < num_layers - 1) {
      layer_input = at::dropout(layer_input, dropout_p, /*train=*/true);
    }
  }
  Tensor output = batch_first ? layer_input.transpose(0, 1) : layer_input;
  return {output, at::stack(layer_hy, 0), at::stack(layer_cy, 0)};
}

}  // namespace
}  // namespace sim_accel

namespace sim_accel {
namespace {

// lstm.input as torch_npu registers it (a kernel of the device's own, for PrivateUse1 and
// AutogradPrivateUse1): its strictness first (strict.cpp: the aclnn refusals of the npu's LSTM; the
// operators it runs are checked one by one), then the whole-layer kernel or ATen's composite.
void lstm_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  strict::check(op, stack);
  auto args = torch::jit::last(*stack, 9);
  const Tensor input = args[0].toTensor();
  const std::vector<Tensor> hx = args[1].toTensorVector();
  const std::vector<Tensor> params = args[2].toTensorVector();
  const bool has_biases = args[3].toBool();
  const int64_t num_layers = args[4].toInt();
  const double dropout = args[5].toDouble();
  const bool train = args[6].toBool();
  const bool bidirectional = args[7].toBool();
  const bool batch_first = args[8].toBool();
  torch::jit::drop(*stack, 9);
  auto out = lstm_on_device(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  torch::jit::push(*stack, std::get<0>(out), std::get<1>(out), std::get<2>(out));
}

// The layer kernel and its backward as kernels of the device's own (the CPU's on aliases): they are the
// stand-in's LSTM, not operators the vendor lacks, so they do not reach the boxed fallback.
void own_kernel_on_cpu_aliases(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  TORCH_CHECK(run_on_cpu_aliases(op, stack), op.schema().operator_name(), ": unexpected arguments");
}
}  // namespace
}  // namespace sim_accel

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("lstm.input", torch::CppFunction::makeFromBoxedFunction<&sim_accel::lstm_kernel>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace sim_accel;
  m.impl("_thnn_fused_lstm_cell", &fused_lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", &fused_lstm_cell_backward_impl);
  m.impl("_thnn_fused_gru_cell", &fused_gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", &fused_gru_cell_backward);
  // also below autograd (inference mode), and so strict mode sees a kernel of the device's own and leaves it
  m.impl("lstm.input", torch::CppFunction::makeFromBoxedFunction<&lstm_kernel>());
  m.impl("mkldnn_rnn_layer", torch::CppFunction::makeFromBoxedFunction<&own_kernel_on_cpu_aliases>());
  m.impl("mkldnn_rnn_layer_backward", torch::CppFunction::makeFromBoxedFunction<&own_kernel_on_cpu_aliases>());
}
