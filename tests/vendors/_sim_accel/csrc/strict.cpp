// torch_npu's strictness for the npu stand-in: see strict.h and tests/vendors/README.md.
//
// Sources (quoted in tests/vendors/torch_npu/_data/messages.json): torch_npu's
// torch_npu/csrc/aten/VariableFallbackKernel.cpp (CPU fallback warning once per operator, sparse refusal),
// torch_npu/csrc/framework/utils/CpuFallbackUtils.h (TORCH_NPU_FALLBACK_CPU_DISABLE),
// torch_npu/csrc/core/npu/NPUException.cpp (warn_: c10's base WarningHandler, so stderr and never a Python
// warning; ERR<module><code> suffixes), OptionsManager.cpp (warnings on rank 0 or -1 only, off with
// TORCH_NPU_WARNING_DISABLE=1), torch_npu/csrc/aten/common/ToKernelNpu.cpp (double -> float cast),
// op-plugin's EXEC_NPU_CMD / NPU_CHECK_ERROR (aclnn refusals).

#include "strict.h"

#include "sim_accel.h"

#include <ATen/ops/_to_copy_native.h>
#include <ATen/ops/to_native.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <iomanip>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace sim_accel {
namespace strict {
namespace {

struct Rule {
  std::string api;     // aclnn API named in the refusal
  int64_t allowed;     // bit per c10::ScalarType; -1: dtypes not known to be refused
};

// A rule mask's flag (above every ScalarType bit): the kernel hands a complex input to its aclnn API as pairs of
// reals (op-plugin's HackComplexintoFloat, the FFT kernels), so the API sees, and refuses, the real value type.
constexpr int64_t kComplexAsReal = int64_t(1) << 62;

struct Decision {
  bool supported = false;
  const Rule* rule = nullptr;
};

struct Config {
  std::unordered_set<std::string> supported;  // "name" / "name.overload" of aten (torch_npu's list)
  std::unordered_map<std::string, Rule> rules;  // op-plugin kernel name ("mm", "mm_out") -> aclnn API
  std::vector<std::string> warning_envs;      // TORCH_NPU_WARNING_DISABLE / TORCH_NPU_DISABLED_WARNING
  bool fallback_disable_env = false;          // this torch_npu reads TORCH_NPU_FALLBACK_CPU_DISABLE
  std::string double_text;                    // "Device do not support double dtype now, ..."
  std::vector<std::string> composites;        // "name.overload|<composite key>" (configure)
  std::unordered_set<std::string> sparse;     // what torch_npu registers for SparsePrivateUse1
  std::string double_op;                      // "_to_copy" (torch_npu >= 2.6) or "to.dtype"
};

bool g_on = false;
Config* g_config = nullptr;
std::vector<std::unique_ptr<torch::Library>> g_libraries;  // runtime registrations, kept for the process
std::mutex g_mutex;
std::unordered_map<const void*, Decision> g_decisions;
std::unordered_set<std::string> g_warned;
thread_local int t_inside = 0;  // > 0 inside an operator torch_npu runs as one kernel (a composite here)

struct Inside {
  Inside() { ++t_inside; }
  ~Inside() { --t_inside; }
};

int64_t rank_id() {  // OptionsManager::GetRankId
  const char* v = std::getenv("RANK");
  return v != nullptr ? std::strtol(v, nullptr, 10) : -1;
}

bool should_print_warning() {  // OptionsManager::ShouldPrintWarning (static: read once, at the first warning)
  static const bool print = [] {
    for (const auto& name : g_config->warning_envs) {
      const char* v = std::getenv(name.c_str());
      if (v != nullptr && std::strtol(v, nullptr, 10) == 1) {
        return false;
      }
    }
    const auto rank = rank_id();
    return rank == 0 || rank == -1;
  }();
  return print;
}

bool cpu_fallback_enabled() {  // OptionsManager::IsCpuFallbackEnable
  static const bool enabled = [] {
    if (!g_config->fallback_disable_env) {
      return true;
    }
    const char* v = std::getenv("TORCH_NPU_FALLBACK_CPU_DISABLE");
    return v == nullptr || std::strtol(v, nullptr, 10) == 0;
  }();
  return enabled;
}

// NPUException.cpp warn_: c10's base handler (c10 logging on stderr), whatever handler Python installed.
void npu_warn(const char* function, const std::string& msg) {
  if (!should_print_warning()) {
    return;
  }
  c10::WarningHandler base;
  base.process(c10::Warning(c10::UserWarning(), {function, __FILE__, static_cast<uint32_t>(__LINE__)}, msg, false));
}

std::string timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::ostringstream oss;
  oss << std::put_time(&tm, "%Y-%m-%d-%H:%M:%S");
  return oss.str();
}

// NPUException.cpp formatErrorCode: "\n[ERROR] <time> (PID:<pid>, Device:<d>, RankID:<r>) ERR<mm><ccc> <MOD> <what>",
// empty under TORCH_NPU_COMPACT_ERROR_OUTPUT (OptionsManager::IsCompactErrorOutput). The one formatter of the
// suffix: the stand-in's HCCL errors (_distributed.py, HcclRules.dist_error) call it as
// torch.ops.sim_accel_strict.error_code.
std::string error_code(int64_t module, const std::string& module_name, int64_t code, const std::string& what) {
  const char* compact = std::getenv("TORCH_NPU_COMPACT_ERROR_OUTPUT");
  if (compact != nullptr && std::strtol(compact, nullptr, 10) != 0) {
    return "";
  }
  std::ostringstream oss;
  oss << "\n[ERROR] " << timestamp() << " (PID:" << getpid() << ", Device:" << current_device()
      << ", RankID:" << rank_id() << ") ERR" << std::setw(2) << std::setfill('0') << module << std::setw(3)
      << std::setfill('0') << code << " " << module_name << " " << what;
  return oss.str();
}

const char* dt_name(c10::ScalarType t) {  // aclnn's DataType names
  switch (t) {
    case c10::ScalarType::Double: return "DT_DOUBLE";
    case c10::ScalarType::Float: return "DT_FLOAT";
    case c10::ScalarType::Half: return "DT_FLOAT16";
    case c10::ScalarType::BFloat16: return "DT_BFLOAT16";
    case c10::ScalarType::Long: return "DT_INT64";
    case c10::ScalarType::Int: return "DT_INT32";
    case c10::ScalarType::Short: return "DT_INT16";
    case c10::ScalarType::Char: return "DT_INT8";
    case c10::ScalarType::Byte: return "DT_UINT8";
    case c10::ScalarType::Bool: return "DT_BOOL";
    case c10::ScalarType::ComplexFloat: return "DT_COMPLEX64";
    case c10::ScalarType::ComplexDouble: return "DT_COMPLEX128";
    default: return "DT_UNDEFINED";
  }
}

std::string support_list(int64_t allowed) {
  static const c10::ScalarType order[] = {
      c10::ScalarType::Float, c10::ScalarType::Half, c10::ScalarType::BFloat16, c10::ScalarType::Double,
      c10::ScalarType::Int, c10::ScalarType::Long, c10::ScalarType::Short, c10::ScalarType::Char,
      c10::ScalarType::Byte, c10::ScalarType::Bool, c10::ScalarType::ComplexFloat,
      c10::ScalarType::ComplexDouble};
  std::string out = "[";
  for (auto t : order) {
    if (allowed & (int64_t(1) << static_cast<int>(t))) {
      out += dt_name(t);
      out += ",";
    }
  }
  return out + "]";
}

// op-plugin's EXEC_NPU_CMD: GetWorkspaceSize fails (ACLNN_ERR_PARAM_INVALID, 161002) and NPU_CHECK_ERROR
// raises with CANN's error message (EZ1001) appended.
[[noreturn]] void aclnn_refuse(const std::string& kernel, const std::string& api, const std::string& detail) {
  TORCH_CHECK(false, kernel, ": NPU function error: call ", api, " failed, error code is 161002",
              error_code(0, "PTA", 100, "call acl api failed"), ".\nEZ1001: [PID: ", getpid(), "] ",
              timestamp(), " ", detail);
}

// The op-plugin kernel name of an overload: its name, "_out" for out= variants (torchgen's cpp.name).
std::string kernel_name(const c10::FunctionSchema& schema) {
  std::string name = schema.name();
  const auto colon = name.find("::");
  if (colon != std::string::npos) {
    name = name.substr(colon + 2);
  }
  for (const auto& a : schema.arguments()) {
    if (a.is_out()) {
      return name + "_out";
    }
  }
  return name;
}

const Decision& decide(const c10::OperatorHandle& op) {
  const void* key = &op.schema();
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_decisions.find(key);
  if (it != g_decisions.end()) {
    return it->second;
  }
  Decision d;
  const auto& name = op.operator_name();
  if (name.name.rfind("aten::", 0) == 0) {
    std::string full = name.name.substr(6);
    if (!name.overload_name.empty()) {
      full += "." + name.overload_name;
    }
    d.supported = g_config->supported.count(full) > 0;
    auto rule = g_config->rules.find(kernel_name(op.schema()));
    if (rule != g_config->rules.end()) {
      d.rule = &rule->second;
    }
  }
  return g_decisions.emplace(key, d).first->second;
}

// The aclnn checks of the kernel torch_npu runs: the first tensor argument's dtype and dimensions.
void check_rule(const c10::OperatorHandle& op, const Rule& rule, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const size_t begin = stack->size() - args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = (*stack)[begin + i];
    at::Tensor t;
    if (v.isTensor()) {
      t = v.toTensor();
    } else if (v.isTensorList() && !v.toTensorList().empty()) {
      t = v.toTensorList().get(0);
    } else {
      continue;
    }
    if (!t.defined() || !t.device().is_privateuseone()) {
      return;
    }
    auto dtype = t.scalar_type();
    if (rule.allowed != -1 && (rule.allowed & kComplexAsReal) && c10::isComplexType(dtype)) {
      dtype = c10::toRealValueType(dtype);
    }
    if (rule.allowed != -1 && !(rule.allowed & (int64_t(1) << static_cast<int>(dtype)))) {
      aclnn_refuse(kernel_name(op.schema()), rule.api,
                   args[i].name() + " not implemented for " + dt_name(dtype) +
                       ", should be in dtype support list " + support_list(rule.allowed) + ".");
    }
    if (t.dim() > 8) {
      aclnn_refuse(kernel_name(op.schema()), rule.api,
                   "The " + args[i].name() + " tensor cannot be larger than 8 dimensions.");
    }
    return;
  }
}

// VariableFallbackKernel.cpp npu_cpu_fallback, before it runs at::native::cpu_fallback.
void cpu_fallback_caution(const c10::OperatorHandle& op) {
  const auto op_name = c10::toString(op.schema().operator_name());
  TORCH_CHECK(cpu_fallback_enabled(), "The operator '", op_name,
              "' would execute its main computation on CPU through dispatcher backend fallback because no "
              "kernel is registered for the NPU PrivateUse1 backend, but CPU fallback is disabled by "
              "TORCH_NPU_FALLBACK_CPU_DISABLE=1.",
              error_code(1, "OPS", 7, "feature not supported"));
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    first = g_warned.insert(op_name).second;
  }
  if (first) {
    std::ostringstream msg;
    msg << "CAUTION: The operator '" << op.schema().operator_name() << "' is not currently supported "
        << "on the NPU backend and will fall back to run on the CPU." << " This may have performance implications.";
    npu_warn("npu_cpu_fallback", msg.str());
  }
}

// An operator torch_npu registers that is a composite in torch: the stand-in runs torch's composite kernel,
// and the operators it calls count as parts of torch_npu's one kernel (no fallback warning, no aclnn check).
template <c10::DispatchKey Composite>
void composite_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (t_inside == 0) {
    const Decision& d = decide(op);
    if (d.rule != nullptr) {
      check_rule(op, *d.rule, stack);
    }
  }
  Inside inside;
  op.callBoxedForDispatchKey(Composite, *stack);
}

void warn_double_once() {  // TORCH_NPU_WARN_ONCE in ToKernelNpu.cpp
  static const bool warned = [] {
    npu_warn("_to_copy", g_config->double_text);
    return true;
  }();
  (void)warned;
}

// torch_npu >= 2.6 (ToKernelNpu.cpp _to_copy): a dtype-only cast of an npu tensor to float64 gives float32.
at::Tensor to_copy(const at::Tensor& self, c10::optional<c10::ScalarType> dtype, c10::optional<c10::Layout> layout,
                   c10::optional<c10::Device> device, c10::optional<bool> pin_memory, bool non_blocking,
                   c10::optional<c10::MemoryFormat> memory_format) {
  if (dtype.has_value() && !layout.has_value() && !device.has_value() && self.scalar_type() != *dtype &&
      *dtype == c10::ScalarType::Double) {
    warn_double_once();
    dtype = c10::ScalarType::Float;
  }
  return at::native::_to_copy(self, dtype, layout, device, pin_memory, non_blocking, memory_format);
}

// torch_npu 2.1 - 2.5 (ToKernelNpu.cpp, to.dtype): the same cast, in Tensor.to(dtype).
at::Tensor to_dtype(const at::Tensor& self, c10::ScalarType dtype, bool non_blocking, bool copy,
                    c10::optional<c10::MemoryFormat> memory_format) {
  if (self.scalar_type() != dtype && dtype == c10::ScalarType::Double) {
    warn_double_once();
    dtype = c10::ScalarType::Float;
  }
  Inside inside;
  return at::native::to(self, dtype, non_blocking, copy, memory_format);
}

// What torch_npu registers for sparse tensors (SparsePrivateUse1): ATen's device-generic sparse kernels and
// op-plugin's sparse ops, run here by ATen's SparseCPU kernel (the same code for the generic ones).
void sparse_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::SparseCPU), stack);
}

// VariableFallbackKernel.cpp npu_Sparse_fallback: any other operator on a sparse npu tensor.
void sparse_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& name = op.operator_name();
  if (name.name.rfind("aten::", 0) == 0) {
    std::string full = name.name.substr(6);
    if (!name.overload_name.empty()) {
      full += "." + name.overload_name;
    }
    if (g_config->sparse.count(full) > 0) {
      sparse_kernel(op, stack);
      return;
    }
  }
  TORCH_CHECK(false, "CAUTION: The operator '", op.schema().operator_name(),
              "' is not currently supported on the NPU backend.", error_code(1, "OPS", 7, "feature not supported"));
}

std::unique_ptr<torch::Library> library(c10::DispatchKey key, const char* ns) {
  return std::make_unique<torch::Library>(torch::Library::IMPL, ns, key, __FILE__, __LINE__);
}

c10::optional<c10::OperatorHandle> find_op(const std::string& overload) {
  const auto dot = overload.find('.');
  const std::string name = "aten::" + overload.substr(0, dot);
  return c10::Dispatcher::singleton().findSchema({name, dot == std::string::npos ? "" : overload.substr(dot + 1)});
}

bool is_out_variant(const c10::OperatorHandle& op) {
  for (const auto& a : op.schema().arguments()) {
    if (a.is_out()) {
      return true;
    }
  }
  return false;
}

// Which listed operators the stand-in must wrap (see composite_kernel): torch's CompositeImplicitAutograd ones
// (they would decompose), and CompositeExplicitAutogradNonFunctional ones (structured functional / in-place
// forms, which call their out= overload) when torch_npu lists no out= overload of that name. Operators with
// a kernel of the stand-in's own, and CompositeExplicitAutograd ones (their decompositions stay among listed
// operators), are left alone. "name.overload|key".
std::vector<std::string> classify_composites(const Config& c) {
  using K = c10::DispatchKey;
  std::unordered_set<std::string> listed_out_names;  // base names with a listed out= overload
  for (const auto& overload : c.supported) {
    auto op = find_op(overload);
    if (op.has_value() && is_out_variant(*op)) {
      listed_out_names.insert(overload.substr(0, overload.find('.')));
    }
  }
  std::vector<std::string> out;
  for (const auto& overload : c.supported) {
    auto op = find_op(overload);
    if (!op.has_value() || op->hasKernelForDispatchKey(K::PrivateUse1)) {
      continue;
    }
    if (op->hasKernelForDispatchKey(K::CompositeImplicitAutograd)) {
      out.push_back(overload + "|CompositeImplicitAutograd");
    } else if (op->hasKernelForDispatchKey(K::CompositeExplicitAutogradNonFunctional)) {
      std::string base = overload.substr(0, overload.find('.'));
      if (!base.empty() && base.back() == '_') {
        base.pop_back();  // in-place form: its out= overload has the functional name
      }
      if (listed_out_names.count(base) == 0) {
        out.push_back(overload + "|CompositeExplicitAutogradNonFunctional");
      }
    }
  }
  return out;
}

// The registrations strict mode adds to the dispatcher; dropping g_libraries removes them again.
void register_all() {
  const Config* c = g_config;
  using K = c10::DispatchKey;
  auto dense = library(K::PrivateUse1, "aten");
  auto autograd = library(K::AutogradPrivateUse1, "aten");
  for (const auto& entry : c->composites) {
    const auto bar = entry.find('|');
    const std::string name = entry.substr(0, bar);
    const std::string key = entry.substr(bar + 1);
    if (name == c->double_op) {
      continue;
    }
    if (key == "CompositeImplicitAutograd") {  // its autograd is the composite's: keep it on AutogradPrivateUse1
      dense->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&composite_kernel<K::CompositeImplicitAutograd>>());
      autograd->impl(name.c_str(),
                     torch::CppFunction::makeFromBoxedFunction<&composite_kernel<K::CompositeImplicitAutograd>>());
    } else {
      dense->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<
                                    &composite_kernel<K::CompositeExplicitAutogradNonFunctional>>());
    }
  }
  if (c->double_op == "_to_copy") {
    dense->impl("_to_copy", TORCH_FN(to_copy));
  } else if (c->double_op == "to.dtype") {
    dense->impl("to.dtype", TORCH_FN(to_dtype));
    autograd->impl("to.dtype", TORCH_FN(to_dtype));
  }
  // Sparse: the fallback serves the listed operators; the ones with a CompositeExplicitAutograd kernel (which
  // would win over a fallback, e.g. sparse_dim) get the same kernel explicitly.
  auto sparse_lib = library(K::SparsePrivateUse1, "aten");
  for (const auto& name : c->sparse) {
    auto op = find_op(name);
    if (op.has_value() && op->hasKernelForDispatchKey(K::CompositeExplicitAutograd)) {
      sparse_lib->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&sparse_kernel>());
    }
  }
  auto sparse_rest = library(K::SparsePrivateUse1, "_");
  sparse_rest->fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_fallback>());
  g_libraries.push_back(std::move(dense));
  g_libraries.push_back(std::move(autograd));
  g_libraries.push_back(std::move(sparse_lib));
  g_libraries.push_back(std::move(sparse_rest));
}

void configure(std::vector<std::string> supported, std::vector<std::string> sparse,
               std::vector<std::string> rule_names, std::vector<std::string> rule_apis,
               std::vector<int64_t> rule_masks, std::vector<std::string> warning_envs, bool fallback_disable_env,
               std::string double_op, std::string double_text) {
  TORCH_CHECK(g_config == nullptr, "sim_accel_strict.configure: already configured");
  TORCH_CHECK(rule_names.size() == rule_apis.size() && rule_names.size() == rule_masks.size(),
              "sim_accel_strict.configure: rule lists differ in length");
  auto* c = new Config();
  c->supported.insert(supported.begin(), supported.end());
  for (size_t i = 0; i < rule_names.size(); ++i) {
    c->rules[rule_names[i]] = Rule{rule_apis[i], rule_masks[i]};
  }
  c->warning_envs = std::move(warning_envs);
  c->fallback_disable_env = fallback_disable_env;
  c->double_text = std::move(double_text);
  c->sparse.insert(sparse.begin(), sparse.end());
  c->double_op = std::move(double_op);
  c->composites = classify_composites(*c);
  g_config = c;
  register_all();
  g_on = true;
}

std::vector<std::string> composites() {
  TORCH_CHECK(g_config != nullptr, "sim_accel_strict.composites: not configured");
  return g_config->composites;
}

// For benchmarks/standin_strict.py: strict mode off (its registrations removed) and on again, in one process.
void set_enabled(bool on) {
  TORCH_CHECK(g_config != nullptr, "sim_accel_strict.set_enabled: not configured");
  if (on && g_libraries.empty()) {
    register_all();
  } else if (!on) {
    g_libraries.clear();
  }
  g_on = on;
}

bool configured() { return g_config != nullptr; }

}  // namespace

bool check(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (!g_on || t_inside > 0) {
    return true;
  }
  const Decision& d = decide(op);
  if (!d.supported) {
    cpu_fallback_caution(op);
    return false;
  }
  if (d.rule != nullptr) {
    check_rule(op, *d.rule, stack);
  }
  return true;
}

}  // namespace strict
}  // namespace sim_accel

TORCH_LIBRARY(sim_accel_strict, m) {
  m.def("configure(str[] supported, str[] sparse, str[] rule_names, str[] rule_apis, int[] rule_masks, "
        "str[] warning_envs, bool fallback_disable_env, str double_op, str double_text) -> ()",
        &sim_accel::strict::configure);
  m.def("configured() -> bool", &sim_accel::strict::configured);
  m.def("set_enabled(bool on) -> ()", &sim_accel::strict::set_enabled);
  m.def("composites() -> str[]", &sim_accel::strict::composites);
  m.def("error_code(int module, str module_name, int code, str what) -> str", &sim_accel::strict::error_code);
}
