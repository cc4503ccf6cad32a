// The eager-mode launch path of tiledispatch's PyTorch integration, in C++.
//
// A swapped layer's steady-state call in Python costs tens of microseconds of host time per
// direction (autograd.Function, the runtime's lookup, LaunchPlan.run's checks and Triton's Python
// runner), which a host-bound training step pays three times per layer. Here a launch plan is
// registered once (torch_native.py packs it: the CUfunction Triton loaded, grid, block, shared
// memory, the kernel's parameter bytes with the pointer positions to patch, zero fills, the
// workspace and scratch sizes) and a call is: operand checks, output and workspace from PyTorch's
// caching allocator on the current stream, pointer patching and cuLaunchKernel. The autograd node
// is a C++ torch::autograd::Function, so the backward pass runs no Python at all.
//
// Capture-safe under CUDA graphs: every allocation comes from the caching allocator on the
// current stream, memsets and launches go to the current stream, nothing synchronizes.

#include <torch/extension.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda.h>
#include <dlfcn.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// ---- the driver entry points (looked up in libcuda once, as Triton's launcher does) -------------
using LaunchKernelFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, CUstream, void**, void**);
using MemsetD8AsyncFn = CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream);
using GetErrorStringFn = CUresult (*)(CUresult, const char**);

struct Driver {
  LaunchKernelFn launch_kernel = nullptr;
  MemsetD8AsyncFn memset_d8_async = nullptr;
  GetErrorStringFn get_error_string = nullptr;
};

const Driver& driver() {
  static Driver loaded = [] {
    Driver d;
    void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) handle = dlopen("libcuda.so.1", RTLD_NOW);
    TORCH_CHECK(handle != nullptr, "tiledispatch native launch: cannot open libcuda.so.1");
    d.launch_kernel = reinterpret_cast<LaunchKernelFn>(dlsym(handle, "cuLaunchKernel"));
    d.memset_d8_async = reinterpret_cast<MemsetD8AsyncFn>(dlsym(handle, "cuMemsetD8Async"));
    d.get_error_string = reinterpret_cast<GetErrorStringFn>(dlsym(handle, "cuGetErrorString"));
    TORCH_CHECK(d.launch_kernel && d.memset_d8_async && d.get_error_string,
                "tiledispatch native launch: libcuda.so.1 lacks cuLaunchKernel/cuMemsetD8Async");
    return d;
  }();
  return loaded;
}

void check_driver(CUresult result, const char* what, const std::string& kernel) {
  if (result == CUDA_SUCCESS) return;
  const char* text = nullptr;
  driver().get_error_string(result, &text);
  TORCH_CHECK(false, "tiledispatch native launch: ", what, " of ", kernel, " failed: ",
              text ? text : "unknown CUDA error", " (", static_cast<int>(result), ")");
}

// ---- registered plans ----------------------------------------------------------------------------
// Slots of a call's tensors, as in native/launch.py: the two operands, the result, the workspace.
constexpr int kFirst = 0, kSecond = 1, kResult = 2, kWorkspace = 3, kSlots = 4;

struct Patch {           // write slot's data pointer + offset at byte `at` of the parameter buffer
  int64_t at, slot, offset;
};

struct ZeroFill {        // zero `bytes` bytes of slot's data, `offset` bytes in, before the launch
  int64_t slot, offset, bytes;
};

struct Launch {
  CUfunction function = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned threads = 0, shared_bytes = 0;
  std::vector<char> parameters;        // every non-constexpr parameter, then the two scratch pointers
  std::vector<int64_t> param_offsets;  // byte offset of each kernel parameter in `parameters`
  std::vector<Patch> patches;
  int64_t scratch_at = -1;             // offset of the global-scratch pointer; -1: none needed
  int64_t scratch_bytes = 0, scratch_align = 1;
  std::vector<ZeroFill> zero_fills;
};

struct Plan {
  std::string name;                    // kernel name and problem key, for error messages
  int64_t device = 0;
  at::ScalarType dtype = at::kBFloat16;
  c10::MemoryFormat memory_format = c10::MemoryFormat::ChannelsLast;
  std::vector<std::vector<int64_t>> shapes;   // PyTorch shapes of first, second, result
  std::vector<std::string> names;             // their names (x, w, dy, ...)
  int64_t workspace_elements = 0;             // fp32
  std::vector<Launch> launches;
};

std::mutex plans_lock;
std::vector<std::shared_ptr<const Plan>> plans;  // append-only: an id is an index

const Plan& plan_of(int64_t id) {
  std::lock_guard<std::mutex> guard(plans_lock);
  TORCH_CHECK(id >= 0 && id < static_cast<int64_t>(plans.size()), "tiledispatch native launch: no plan ", id);
  return *plans[id];
}

std::string shape_text(at::IntArrayRef shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// A caller's mistake: ValueError in Python (as LaunchPlan.run's LaunchError), naming the operand.
[[noreturn]] void bad_operand(const Plan& plan, const std::string& name, const std::string& rule) {
  throw std::invalid_argument(name + ": " + rule + " (" + plan.name + ")");
}

// An operand as the kernels read it: channels-last and 16-byte aligned (a copy only when it is not).
at::Tensor operand(const Plan& plan, int index, at::Tensor tensor) {
  const std::string& name = plan.names[index];
  if (!tensor.defined()) bad_operand(plan, name, "undefined tensor");
  if (!tensor.is_cuda() || tensor.get_device() != plan.device)
    bad_operand(plan, name, "must be on cuda:" + std::to_string(plan.device) + ", got " + tensor.device().str());
  if (tensor.scalar_type() != plan.dtype)
    bad_operand(plan, name, std::string("dtype must be ") + c10::toString(plan.dtype) + ", got " +
                                c10::toString(tensor.scalar_type()));
  if (!tensor.sizes().equals(plan.shapes[index]))
    bad_operand(plan, name, "shape must be " + shape_text(plan.shapes[index]) + ", got " + shape_text(tensor.sizes()));
  if (!tensor.is_contiguous(plan.memory_format)) tensor = tensor.contiguous(plan.memory_format);
  if (reinterpret_cast<uintptr_t>(tensor.data_ptr()) % 16) tensor = tensor.clone(plan.memory_format);
  return tensor;
}

// The plan's launches on operands that operand() has prepared.
at::Tensor run_prepared(const Plan& plan, const at::Tensor& first, const at::Tensor& second) {
  c10::cuda::CUDAGuard device_guard(static_cast<c10::DeviceIndex>(plan.device));
  auto options = first.options();
  at::Tensor result = at::empty(plan.shapes[kResult], options.memory_format(plan.memory_format));
  at::Tensor workspace;
  if (plan.workspace_elements > 0) workspace = at::empty({plan.workspace_elements}, options.dtype(at::kFloat));
  const uintptr_t pointers[kSlots] = {
      reinterpret_cast<uintptr_t>(first.data_ptr()), reinterpret_cast<uintptr_t>(second.data_ptr()),
      reinterpret_cast<uintptr_t>(result.data_ptr()),
      workspace.defined() ? reinterpret_cast<uintptr_t>(workspace.data_ptr()) : 0};
  CUstream stream = reinterpret_cast<CUstream>(c10::cuda::getCurrentCUDAStream(plan.device).stream());
  const Driver& cuda = driver();
  for (const Launch& launch : plan.launches) {
    for (const ZeroFill& fill : launch.zero_fills) {
      check_driver(cuda.memset_d8_async(static_cast<CUdeviceptr>(pointers[fill.slot] + fill.offset), 0,
                                        static_cast<size_t>(fill.bytes), stream),
                   "zero fill", plan.name);
    }
    // A small buffer per launch: the plan is shared between threads, so it is never written.
    std::vector<char> buffer(launch.parameters);
    for (const Patch& patch : launch.patches) {
      const uint64_t value = pointers[patch.slot] + patch.offset;
      std::memcpy(buffer.data() + patch.at, &value, sizeof(value));
    }
    at::Tensor scratch;
    if (launch.scratch_at >= 0) {
      scratch = at::empty({launch.scratch_bytes + launch.scratch_align}, options.dtype(at::kByte));
      uint64_t address = reinterpret_cast<uint64_t>(scratch.data_ptr());
      address = (address + launch.scratch_align - 1) / launch.scratch_align * launch.scratch_align;
      std::memcpy(buffer.data() + launch.scratch_at, &address, sizeof(address));
    }
    std::vector<void*> parameters(launch.param_offsets.size());
    for (size_t i = 0; i < parameters.size(); ++i) parameters[i] = buffer.data() + launch.param_offsets[i];
    check_driver(cuda.launch_kernel(launch.function, launch.grid[0], launch.grid[1], launch.grid[2], launch.threads,
                                    1, 1, launch.shared_bytes, stream, parameters.data(), nullptr),
                 "cuLaunchKernel", plan.name);
    // `scratch` goes back to the caching allocator here, recorded against this stream's order.
  }
  return result;
}

// ---- autograd --------------------------------------------------------------------------------------
// The shape that broadcasts a bias over (N, K, *spatial): (1, K, 1, ...).
std::vector<int64_t> bias_view(const at::Tensor& y) {
  std::vector<int64_t> shape(y.dim(), 1);
  shape[1] = -1;
  return shape;
}

// conv(x, w) + bias with plans for the forward and the two gradients (-1: that gradient is not
// requested of this node; asking for it is an error, never a silent zero). bias: undefined, or K
// values of y's dtype on its device (the caller checks); its gradient is dY summed over N and space.
// Two autograd nodes share this: ConvBias (bias an input) and Conv (none: an undefined tensor may not
// be an autograd input).
at::Tensor conv_forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                        const at::Tensor& bias, int64_t forward_plan, int64_t data_plan, int64_t weight_plan) {
  const Plan& plan = plan_of(forward_plan);
  at::Tensor x_cl = operand(plan, kFirst, x);
  at::Tensor w_cl = operand(plan, kSecond, weight);  // (named: argument order is unspecified)
  ctx->save_for_backward({x_cl, w_cl});
  ctx->saved_data["data_plan"] = data_plan;
  ctx->saved_data["weight_plan"] = weight_plan;
  at::Tensor y = run_prepared(plan, x_cl, w_cl);
  if (bias.defined()) y.add_(bias.view(bias_view(y)));
  return y;
}

// (dX, dW, dBias) as the node's inputs need them (undefined where not).
std::vector<at::Tensor> conv_backward(torch::autograd::AutogradContext* ctx, const at::Tensor& grad_y,
                                      bool bias) {
  TORCH_CHECK(!at::GradMode::is_enabled(),
              "tiledispatch: double backward of a swapped convolution is not supported (create_graph=True)");
  auto saved = ctx->get_saved_variables();
  at::Tensor grad_x, grad_w, grad_b;
  if (ctx->needs_input_grad(0)) {
    const int64_t id = ctx->saved_data["data_plan"].toInt();
    TORCH_CHECK(id >= 0, "tiledispatch: the input gradient was not planned for this call");
    const Plan& plan = plan_of(id);
    grad_x = run_prepared(plan, operand(plan, kFirst, grad_y), saved[1]);
  }
  if (ctx->needs_input_grad(1)) {
    const int64_t id = ctx->saved_data["weight_plan"].toInt();
    TORCH_CHECK(id >= 0, "tiledispatch: the weight gradient was not planned for this call");
    const Plan& plan = plan_of(id);
    grad_w = run_prepared(plan, saved[0], operand(plan, kSecond, grad_y));
  }
  if (bias && ctx->needs_input_grad(2)) {
    std::vector<int64_t> dims{0};
    for (int64_t d = 2; d < grad_y.dim(); ++d) dims.push_back(d);
    grad_b = grad_y.sum(dims);
  }
  return {grad_x, grad_w, grad_b};
}

struct ConvBias : public torch::autograd::Function<ConvBias> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, int64_t forward_plan, int64_t data_plan, int64_t weight_plan) {
    return conv_forward(ctx, x, weight, bias, forward_plan, data_plan, weight_plan);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto g = conv_backward(ctx, grads[0], true);
    return {g[0], g[1], g[2], at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct Conv : public torch::autograd::Function<Conv> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            int64_t forward_plan, int64_t data_plan, int64_t weight_plan) {
    return conv_forward(ctx, x, weight, at::Tensor(), forward_plan, data_plan, weight_plan);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto g = conv_backward(ctx, grads[0], false);
    return {g[0], g[1], at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The Python entry points raise ValueError for a caller's mistake (std::invalid_argument) and
// RuntimeError, without the C++ backtrace, for the rest (c10::Error's text).
template <typename Body>
auto translated(Body body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const c10::Error& error) {
    throw std::runtime_error(error.what_without_backtrace());
  }
}

at::Tensor conv(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                int64_t forward_plan, int64_t data_plan, int64_t weight_plan) {
  return translated([&] {
    if (bias.has_value() && bias->defined())
      return ConvBias::apply(x, weight, *bias, forward_plan, data_plan, weight_plan);
    return Conv::apply(x, weight, forward_plan, data_plan, weight_plan);
  });
}

at::Tensor run(const at::Tensor& first, const at::Tensor& second, int64_t id) {
  return translated([&] {
    const Plan& plan = plan_of(id);
    at::Tensor first_ready = operand(plan, kFirst, first);
    at::Tensor second_ready = operand(plan, kSecond, second);
    return run_prepared(plan, first_ready, second_ready);
  });
}

// ---- registration ----------------------------------------------------------------------------------
// One launch: (function handle, (gx, gy, gz), threads, shared bytes, parameter bytes, offsets of the
// kernel's parameters in them, patches [(at, slot, offset)], scratch (at, bytes, align) with at -1 for
// none, zero fills [(slot, offset, bytes)]).
using LaunchSpec = std::tuple<uint64_t, std::vector<int64_t>, int64_t, int64_t, std::string, std::vector<int64_t>,
                              std::vector<std::vector<int64_t>>, std::vector<int64_t>,
                              std::vector<std::vector<int64_t>>>;

at::ScalarType scalar_type(const std::string& dtype) {
  if (dtype == "bf16") return at::kBFloat16;
  if (dtype == "fp16") return at::kHalf;
  if (dtype == "fp32") return at::kFloat;
  TORCH_CHECK(false, "register_plan: dtype must be bf16, fp16 or fp32, got ", dtype);
}

int64_t register_plan(const std::string& name, int64_t device, const std::string& dtype, bool channels_last_3d,
                      const std::vector<std::vector<int64_t>>& shapes, const std::vector<std::string>& names,
                      int64_t workspace_elements, const std::vector<LaunchSpec>& launches) {
  TORCH_CHECK(shapes.size() == 3 && names.size() == 3, "register_plan: three operand shapes and names");
  TORCH_CHECK(workspace_elements >= 0, "register_plan: workspace_elements must be >= 0");
  auto plan = std::make_shared<Plan>();
  plan->name = name;
  plan->device = device;
  plan->dtype = scalar_type(dtype);
  plan->memory_format = channels_last_3d ? c10::MemoryFormat::ChannelsLast3d : c10::MemoryFormat::ChannelsLast;
  plan->shapes = shapes;
  plan->names = names;
  plan->workspace_elements = workspace_elements;
  for (const LaunchSpec& spec : launches) {
    Launch launch;
    launch.function = reinterpret_cast<CUfunction>(std::get<0>(spec));
    const auto& grid = std::get<1>(spec);
    TORCH_CHECK(grid.size() == 3 && grid[0] > 0 && grid[1] > 0 && grid[2] > 0, "register_plan: grid of ", name);
    for (int i = 0; i < 3; ++i) launch.grid[i] = static_cast<unsigned>(grid[i]);
    launch.threads = static_cast<unsigned>(std::get<2>(spec));
    launch.shared_bytes = static_cast<unsigned>(std::get<3>(spec));
    const std::string& bytes = std::get<4>(spec);
    launch.parameters.assign(bytes.begin(), bytes.end());
    launch.param_offsets = std::get<5>(spec);
    const int64_t size = static_cast<int64_t>(launch.parameters.size());
    for (int64_t offset : launch.param_offsets)
      TORCH_CHECK(offset >= 0 && offset < size, "register_plan: parameter offset out of range in ", name);
    for (const auto& patch : std::get<6>(spec)) {
      TORCH_CHECK(patch.size() == 3 && patch[0] >= 0 && patch[0] + 8 <= size && patch[1] >= 0 && patch[1] < kSlots,
                  "register_plan: bad pointer patch in ", name);
      TORCH_CHECK(patch[1] != kWorkspace || workspace_elements > 0, "register_plan: ", name,
                  " patches the workspace, which it has none of");
      launch.patches.push_back({patch[0], patch[1], patch[2]});
    }
    const auto& scratch = std::get<7>(spec);
    TORCH_CHECK(scratch.size() == 3, "register_plan: scratch of ", name);
    launch.scratch_at = scratch[0];
    launch.scratch_bytes = scratch[1];
    launch.scratch_align = std::max<int64_t>(scratch[2], 1);
    TORCH_CHECK(launch.scratch_at < 0 || launch.scratch_at + 8 <= size, "register_plan: scratch position of ", name);
    for (const auto& fill : std::get<8>(spec)) {
      TORCH_CHECK(fill.size() == 3 && fill[0] >= 0 && fill[0] < kSlots && fill[1] >= 0 && fill[2] >= 0,
                  "register_plan: bad zero fill in ", name);
      TORCH_CHECK(fill[0] != kWorkspace || workspace_elements > 0, "register_plan: ", name,
                  " zero-fills the workspace, which it has none of");
      launch.zero_fills.push_back({fill[0], fill[1], fill[2]});
    }
    plan->launches.push_back(std::move(launch));
  }
  std::lock_guard<std::mutex> guard(plans_lock);
  plans.push_back(std::move(plan));
  return static_cast<int64_t>(plans.size()) - 1;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.doc() = "tiledispatch's eager launch path: registered launch plans run from C++ (see torch_native.py)";
  module.def(
      "register_plan",
      [](const std::string& name, int64_t device, const std::string& dtype, bool channels_last_3d,
         const std::vector<std::vector<int64_t>>& shapes, const std::vector<std::string>& names,
         int64_t workspace_elements, const std::vector<LaunchSpec>& launches) {
        return translated([&] {
          return register_plan(name, device, dtype, channels_last_3d, shapes, names, workspace_elements, launches);
        });
      },
      "Register a packed launch plan; returns its id");
  module.def("run", &run, "One direction: run plan `id` on (first, second); returns the result");
  module.def("conv", &conv, "conv(x, w, bias or None, forward_plan, data_plan, weight_plan) with a C++ autograd node");
}
