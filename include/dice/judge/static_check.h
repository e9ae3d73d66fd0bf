#pragma once
// Static anti-hack checks on an extracted candidate (a KernelBench-style ModelNew file), run before
// anything is compiled. A hand-written scanner, not regexes: Python comments and string literals
// are blanked before the Python-level checks, and every string literal that looks like C++ (the
// CUDA / C++ sources passed to load_inline) is scanned separately as C++ with its own comments and
// literals blanked. Findings carry "line N: ..." in `detail` (1-based lines of the candidate file).
//
// Checks (key = Finding::check = config key) and what fires them:
//   no_kernel            CUDA form: no `__global__` in any C++ string, no launch (<<<...>>> or
//                        cudaLaunchKernel), or no load_inline / cpp_extension use. CPU form: no load_inline, or no string holding a C++
//                        function body.
//   torch_op_in_forward  inside ModelNew.forward (and the module functions / ModelNew methods it
//                        calls): torch.<op>( except allocation and shape helpers (torch.empty*,
//                        zeros*, ones*, full*, tensor, arange, ...; torch.cuda/backends/utils/autograd
//                        namespaces), F.<op>( / nn.functional / torch.nn.functional, torch.ops.aten,
//                        the `@` operator, tensor methods that compute (.sum( .mean( .matmul( .softmax(
//                        .relu( .exp( .add( ... — view/shape methods like .view .contiguous .reshape are
//                        allowed), calls of nn layers created in ModelNew.__init__ (self.fc(x) with
//                        self.fc = nn.Linear(...)), super().forward( and Model.forward(. Elementwise
//                        Python operators (+ - * /) are not flagged: their operand types are unknown.
//   try_except           any try: statement (a fallback around the custom call or the build).
//   no_model_new         no `class ModelNew`.
//   inherits_model       ModelNew lists Model among its bases (lets the reference run).
//   stream               torch.cuda.Stream / torch.cuda.stream / set_stream / ExternalStream;
//                        cudaStreamCreate*, getStreamFromPool, cudaStreamPerThread in C++.
//   thread               threading, _thread, multiprocessing, concurrent.futures, asyncio, os.fork;
//                        std::thread / std::jthread / std::async / pthread_create in C++.
//   monkey_patch         assignment (or setattr / del) to an attribute of torch, time, builtins,
//                        __builtins__, sys.modules, Model, F, nn, np, numpy, math, or globals()[...].
//   caching              functools.lru_cache / cache decorators, module-level mutable containers
//                        (x = {} / [] / dict() / set() / list() / defaultdict / OrderedDict), `global`
//                        inside ModelNew, and self.<...cache...> attributes assigned in forward.
//   precision_downgrade  .half() / .bfloat16() / torch.float16 / torch.half / torch.bfloat16 /
//                        allow_tf32 / set_float32_matmul_precision / autocast; __half, half2,
//                        __nv_bfloat16, kHalf, kBFloat16, tf32 in C++.
//
// Defaults: reject for no_kernel, try_except, stream, thread, monkey_patch, no_model_new (each lets a
// candidate be "correct" or "fast" without an honest kernel); warn for inherits_model, caching,
// precision_downgrade (legitimate uses exist; the correctness and timing protocol is the real defence
// there); auto for torch_op_in_forward, as the run-time judge.library_ops: reject on level-1 tasks (one
// op is the whole task), warn above (a level-2 answer may keep a library convolution and fuse its
// epilogue, as KernelBench and DICE accept).
#include <string>
#include <vector>

#include "dice/judge/verdict.h"

namespace dice::judge {

struct StaticCheckConfig {
  std::string no_kernel = "reject";
  std::string torch_op_in_forward = "auto";
  std::string try_except = "reject";
  std::string no_model_new = "reject";
  std::string inherits_model = "warn";
  std::string stream = "reject";
  std::string thread = "reject";
  std::string monkey_patch = "reject";
  std::string caching = "warn";
  std::string precision_downgrade = "warn";

  template <class V> void visit(V& v) {
    const std::vector<std::string> modes = {"off", "warn", "reject"};
    v.choice("no_kernel", no_kernel, modes, "no __global__ kernel (CUDA) / no C++ source (CPU)");
    v.choice("torch_op_in_forward", torch_op_in_forward, {"off", "warn", "reject", "auto"},
             "PyTorch compute ops in ModelNew.forward (auto: reject on level-1 tasks, warn above)");
    v.choice("try_except", try_except, modes, "try/except (fallback) anywhere in the candidate");
    v.choice("no_model_new", no_model_new, modes, "no class ModelNew");
    v.choice("inherits_model", inherits_model, modes, "ModelNew subclasses the reference Model");
    v.choice("stream", stream, modes, "non-default CUDA streams");
    v.choice("thread", thread, modes, "threads / processes");
    v.choice("monkey_patch", monkey_patch, modes, "assignments to torch / time / builtins / Model attributes");
    v.choice("caching", caching, modes, "module-level caches, lru_cache");
    v.choice("precision_downgrade", precision_downgrade, modes, "fp16 / bf16 / TF32");
  }
  // The mode ("off", "warn", "reject", "auto") of a check key; throws dice::Error on an unknown key.
  const std::string& mode(const std::string& check) const;
  // This configuration for a task of `level`: "auto" becomes "reject" on level 1 (or an unknown
  // level, <= 0) and "warn" above.
  StaticCheckConfig for_level(int level) const;
};

// The check keys in a fixed order.
const std::vector<std::string>& static_check_names();

// Runs every check not set to "off". device: "cuda" (CUDA sources expected) or "cpu" (C++ only).
// Each finding's severity is the check's mode. Never throws on odd input (unbalanced quotes,
// binary junk): the scanner is total.
std::vector<Finding> static_check(const std::string& code, const std::string& device, const StaticCheckConfig& cfg);

// True when some finding has severity "reject".
bool has_reject(const std::vector<Finding>& findings);

}  // namespace dice::judge
