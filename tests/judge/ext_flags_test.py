"""The builder's flag check (ext.forbidden_flag): the flags candidates use pass, and every way we
know to make the compiler or linker run another program, or a shell run a command, is refused.
Also the light_cuda source rewrite (ext.light_cuda_sources) and its fallback rule."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "judge", "python"))
import ext  # noqa: E402


def check(field, flags):
    return ext.forbidden_flag(ext.normalize({field: flags}))


ALLOWED = [["-O3"], ["-O3", "--use_fast_math"], ["-Wl,-Bsymbolic"], ["-lcublas"], ["-std=c++17", "-DFOO=1"],
           ["-fuse-ld=gold"], ["-Xptxas=-v"], ["-arch=sm_90a"], ["-Xcompiler", "-fopenmp"], ["-march=native"]]
REFUSED = [["-wrapper", "sh"], ["-O3 -wrapper sh,-c,x"], ["-Xcompiler=-B/tmp"], ["-O3;touch x"], ["$(id)"],
           ["`id`"], ["@main.cpp"], ["-fplugin=/x.so"], ["-ccbin", "/x"], ["-Xcompiler", "-wrapper,/bin/sh"],
           ["-fuse-ld=/tmp/ld"], ["--ld-path=/x"], ["-Wl,-plugin,/x.so"], ["-B", "/tmp"], ["-O2 | sh"],
           ["-O2\nsh"], ["--run"], ["-specs=/tmp/s"]]

failed = 0
for field in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags"):
    for flags in ALLOWED:
        if check(field, flags) is not None:
            print("refused but allowed:", field, flags)
            failed += 1
    for flags in REFUSED:
        if check(field, flags) is None:
            print("allowed but must be refused:", field, flags)
            failed += 1
if check("extra_include_paths", ["/usr/include", "/opt/x/include"]) is not None:
    print("an include path was refused")
    failed += 1
for bad in (["/x -wrapper"], ["-B/tmp"], ["/x;sh"]):
    if check("extra_include_paths", bad) is None:
        print("include path allowed but must be refused:", bad)
        failed += 1

# light_cuda: only a line that includes torch/extension.h leaves the .cu; everything else stays.
cu = ("#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n  # include \"torch/extension.h\"  // again\n"
      "__global__ void k() {}\n// #include <torch/extension.h> in a comment\nconst char* s = \"#include <torch/extension.h>\";\n")
light = ext.light_cuda_sources([cu])[0]
if light.count("torch/extension.h") != 4 or light.count("dice light_cuda") != 2:
    print("light_cuda_sources removed the wrong lines:\n" + light)
    failed += 1
if light.count("\n") != cu.count("\n") or "CUDAContext.h" not in light or "__global__ void k()" not in light:
    print("light_cuda_sources changed other lines:\n" + light)
    failed += 1
if ext.light_cuda_sources(["__global__ void k() {}"]) != ["__global__ void k() {}"]:
    print("light_cuda_sources changed a source without the include")
    failed += 1
# after a failed light .cu build: build the .cu as written unless only main.cpp failed
nvcc_log = "FAILED: cuda.cuda.o\n/tmp/b/cuda.cu(12): error: identifier \"py\" is undefined"
gxx_log = ("[1/3] nvcc -c /tmp/b/cuda.cu -o cuda.cuda.o\nFAILED: main.o\nc++ -c /tmp/b/main.cpp -o main.o\n"
           "/tmp/b/main.cpp:3:1: error: expected ';'")
if (not ext.cuda_error_in_log(nvcc_log) or ext.cuda_error_in_log(gxx_log)
        or ext.cuda_error_in_log("FAILED: [code=1] main.o\n") or not ext.cuda_error_in_log("ld: error")
        or not ext.cuda_error_in_log("FAILED: main.o\nFAILED: cuda.cuda.o\n")):
    print("cuda_error_in_log misjudged a log")
    failed += 1
print("ext flag checks:", "FAIL" if failed else "ok", "(%d failures)" % failed)
sys.exit(1 if failed else 0)
