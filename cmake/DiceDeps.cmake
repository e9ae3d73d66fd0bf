# Finds every third-party dependency once, for both machines:
#  - CPU machines: Debian packages (libtorch-dev 1.13 CPU, OpenMPI, HDF5, ...).
#  - GPU nodes: LibTorch from the installed PyTorch (torch.utils.cmake_prefix_path), CUDA on.

find_package(Threads REQUIRED)

# LibTorch: a Debian package on CPU machines, else the Python install's CMake package.
find_package(Torch QUIET)
if(NOT Torch_FOUND)
  foreach(py python3 /usr/bin/python3)
    execute_process(COMMAND ${py} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                    OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE _rc ERROR_QUIET)
    if(_rc EQUAL 0 AND _torch_prefix)
      list(APPEND CMAKE_PREFIX_PATH "${_torch_prefix}")
      break()
    endif()
  endforeach()
  find_package(Torch REQUIRED)
endif()
set(DICE_TORCH_CUDA OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES OR CUDA_FOUND)
  set(DICE_TORCH_CUDA ON)
endif()
message(STATUS "dice: LibTorch ${Torch_VERSION} (CUDA: ${DICE_TORCH_CUDA}) from ${Torch_DIR}")
# A GPU machine whose Python torch has CUDA, but the LibTorch found first is a CPU one (Debian's
# libtorch-dev): say so loudly, with the command that builds against the CUDA one.
if(NOT DICE_TORCH_CUDA)
  foreach(py python3 /usr/bin/python3)
    execute_process(COMMAND ${py} -c "import torch, torch.utils; print(int(torch.cuda.is_available() or bool(torch.version.cuda)), torch.utils.cmake_prefix_path)"
                    OUTPUT_VARIABLE _pt OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)
    if(_rc EQUAL 0 AND _pt MATCHES "^1 ")
      string(SUBSTRING "${_pt}" 2 -1 _pt_prefix)
      message(WARNING "dice: this build uses a LibTorch without CUDA (${Torch_DIR}), but ${py}'s torch has CUDA. "
                      "For a GPU build: cmake -S . -B build-gpu -DCMAKE_PREFIX_PATH=${_pt_prefix} (or tools/gpu/build.sh).")
      break()
    endif()
  endforeach()
endif()
# Torch's flags (e.g. -D_GLIBCXX_USE_CXX11_ABI) as a usage requirement of one interface target.
add_library(dice_torch INTERFACE)
separate_arguments(_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(dice_torch INTERFACE ${_torch_flags})
target_link_libraries(dice_torch INTERFACE ${TORCH_LIBRARIES})
if(DICE_TORCH_CUDA)
  target_compile_definitions(dice_torch INTERFACE DICE_WITH_CUDA=1)
endif()

find_package(MPI REQUIRED COMPONENTS CXX)
find_package(HDF5 REQUIRED COMPONENTS C)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3 QUIET)
if(NOT nlohmann_json_FOUND)
  find_path(NLOHMANN_INCLUDE nlohmann/json.hpp REQUIRED)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${NLOHMANN_INCLUDE}")
endif()
find_package(CLI11 QUIET)
if(NOT CLI11_FOUND)
  find_path(CLI11_INCLUDE CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${CLI11_INCLUDE}")
endif()
if(DICE_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

# yaml-cpp exports either yaml-cpp or yaml-cpp::yaml-cpp depending on its version.
if(TARGET yaml-cpp::yaml-cpp)
  set(DICE_YAML_TARGET yaml-cpp::yaml-cpp)
else()
  set(DICE_YAML_TARGET yaml-cpp)
endif()

add_library(dice_hdf5 INTERFACE)
target_include_directories(dice_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS})
target_link_libraries(dice_hdf5 INTERFACE ${HDF5_C_LIBRARIES} ${HDF5_LIBRARIES})
target_compile_definitions(dice_hdf5 INTERFACE ${HDF5_DEFINITIONS} ${HDF5_C_DEFINITIONS})

# NCCL (GPU nodes only): headers + library, used by the dist module's NCCL backend.
set(DICE_WITH_NCCL OFF)
if(DICE_TORCH_CUDA)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS /usr/include /usr/local/cuda/include)
  find_library(NCCL_LIBRARY nccl HINTS /usr/lib/x86_64-linux-gnu /usr/local/cuda/lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(DICE_WITH_NCCL ON)
    add_library(dice_nccl INTERFACE)
    target_include_directories(dice_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
    target_link_libraries(dice_nccl INTERFACE ${NCCL_LIBRARY})
    target_compile_definitions(dice_nccl INTERFACE DICE_WITH_NCCL=1)
    file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_v REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*NCCL_PATCH ([0-9]+).*" "\\1.\\2.\\3"
           DICE_NCCL_VERSION "${_nccl_v}")
  endif()
endif()

# The Python interpreter that holds torch: the judge's executors and the test peers run it.
set(DICE_PYTHON "" CACHE STRING "Python interpreter with torch (empty: probe)")
if(NOT DICE_PYTHON)
  foreach(py python3 /usr/bin/python3)
    execute_process(COMMAND ${py} -c "import torch, sys; print(sys.executable)"
                    OUTPUT_VARIABLE _py OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)
    if(_rc EQUAL 0 AND _py)
      set(DICE_PYTHON "${_py}" CACHE STRING "Python interpreter with torch (empty: probe)" FORCE)
      break()
    endif()
  endforeach()
endif()
message(STATUS "dice: Python with torch: ${DICE_PYTHON}")
