"""The op record's kernel classes (harness.evidence) and the kernel names a source defines
(extflags.kernel_names): a kernel the candidate's sources define is its own whatever its name (an
honest `gemm_kernel` is not a library's because it says gemm), unless it sits in a library's
namespace; a kernel they do not define is a library's when named like one. The events are built
here as the profiler reports them (name, device type, CPU parent).  usage: python3 evidence_test.py"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "src", "judge", "python"))
import extflags  # noqa: E402
import harness  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


class Event:
    def __init__(self, name, device="DeviceType.CUDA", parent=None):
        self.name, self.device_type, self.cpu_parent = name, device, parent


class Prof:
    def __init__(self, events):
        self._events = events

    def events(self):
        return self._events


SOURCE = r'''
// __global__ void commented_out(float* p) {}
template <typename T, int kVec>
__global__ void __launch_bounds__(256) cast_kernel(const T* x, float* y, int n) {}
static __global__ void gemm_kernel(const float* a, const float* b, float* c, int n) {}
extern "C" __global__ void
vectorized_elementwise_kernel (float* p) {}
namespace ops { __global__ void scale(float* p, float s) {} }
'''


def main():
    names = extflags.kernel_names([SOURCE])
    check(names == {"cast_kernel", "gemm_kernel", "vectorized_elementwise_kernel", "scale"},
          "kernel names of the source: %s" % sorted(names))
    ext = Event("dice_ext::run", device="DeviceType.CPU")
    events = [ext,
              Event("gemm_kernel(float const*, float const*, float*, int)"),
              Event("void cast_kernel<float, 2>(float const*, float*, int)"),
              Event("ops::scale(float*, float)"),
              Event("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(int, float*)"),
              Event("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_cublas"),
              Event("my_other_kernel(float*)")]
    ev = harness.evidence(Prof(events), True, names)
    own, lib = ev["own_kernels"], ev["library_kernels"]
    for k in ("gemm_kernel(float const*, float const*, float*, int)",
              "void cast_kernel<float, 2>(float const*, float*, int)", "ops::scale(float*, float)",
              "my_other_kernel(float*)"):
        check(k[:80] in own, "own: " + k)
    for k in ("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(int, float*)",
              "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_cublas"):
        check(k[:80] in lib, "library (an own kernel's name in at:: is still ATen's): " + k)
    check(ev["kernels"] and ev["kernel_record"] == "CUPTI" and ev["ext_calls"] == 1, "record: %s" % ev)
    # without the source's names, a kernel named like a library's is counted as the library's (as before)
    ev = harness.evidence(Prof(events), True)
    check("gemm_kernel(float const*, float const*, float*, int)" in ev["library_kernels"],
          "no names given: gemm_kernel reads as a library kernel")
    print("evidence: %d failure(s)" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
