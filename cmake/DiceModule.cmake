# Helpers that give every module and test the same shape.
#
#   dice_add_library(<module> SOURCES a.cpp b.cpp DEPS dice_util ... [TORCH])
#     -> target dice_<module>, headers in include/dice/<module>/, namespace dice::<module>.
#        TORCH: links LibTorch and reuses the shared precompiled LibTorch header.
#   dice_add_test(<module> SOURCES x_test.cpp DEPS ... [MPI_NP n] [LABELS l...] [TORCH]
#                 [SPLITS name=GtestFilter ...])  (slow groups as their own ctest entries <module>_<name>)
#                 [EXCLUDE GtestFilter ...])      (groups that a test of the module's own runs, e.g. as another user)
#     -> executable dice_<module>_tests, registered with CTest (under mpirun when MPI_NP).

set(DICE_INCLUDE_DIR "${PROJECT_SOURCE_DIR}/include")

# One precompiled LibTorch header shared by all torch-using targets: built once, reused.
function(_dice_torch_pch target)
  if(NOT DICE_USE_PCH)
    return()
  endif()
  if(NOT TARGET dice_torch_pch)
    add_library(dice_torch_pch STATIC "${PROJECT_SOURCE_DIR}/cmake/torch_pch.cpp")
    target_link_libraries(dice_torch_pch PUBLIC dice_torch)
    target_precompile_headers(dice_torch_pch PRIVATE "${PROJECT_SOURCE_DIR}/include/dice/util/torch_pch.h")
  endif()
  target_precompile_headers(${target} REUSE_FROM dice_torch_pch)
endfunction()

function(dice_add_library module)
  cmake_parse_arguments(A "TORCH" "" "SOURCES;DEPS" ${ARGN})
  set(t dice_${module})
  add_library(${t} STATIC ${A_SOURCES})
  target_include_directories(${t} PUBLIC "${DICE_INCLUDE_DIR}")
  target_link_libraries(${t} PUBLIC ${A_DEPS})
  target_compile_options(${t} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(A_TORCH)
    target_link_libraries(${t} PUBLIC dice_torch)
    _dice_torch_pch(${t})
  endif()
endfunction()

function(dice_add_test module)
  cmake_parse_arguments(A "TORCH" "MPI_NP;TIMEOUT" "SOURCES;DEPS;LABELS;MAIN;SPLITS;EXCLUDE" ${ARGN})
  set(t dice_${module}_tests)
  add_executable(${t} ${A_SOURCES})
  target_include_directories(${t} PRIVATE "${DICE_INCLUDE_DIR}" "${PROJECT_SOURCE_DIR}/tests")
  target_link_libraries(${t} PRIVATE ${A_DEPS} GTest::gtest Threads::Threads)
  if(A_MAIN)
    target_sources(${t} PRIVATE ${A_MAIN})
  else()
    target_link_libraries(${t} PRIVATE GTest::gtest_main)
  endif()
  target_compile_definitions(${t} PRIVATE
    DICE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    DICE_DATA_DIR="${PROJECT_SOURCE_DIR}/data"
    DICE_PYTHON="${DICE_PYTHON}"
    DICE_BINARY_DIR="${PROJECT_BINARY_DIR}")
  if(A_TORCH)
    target_link_libraries(${t} PRIVATE dice_torch)
    _dice_torch_pch(${t})
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 900)
  endif()
  if(A_MPI_NP)
    add_test(NAME ${module}_np${A_MPI_NP}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${A_MPI_NP} --oversubscribe
                     $<TARGET_FILE:${t}>)
  elseif(A_SPLITS)
    # SPLITS name=GtestFilter ...: one ctest entry per slow group, the rest under <module>
    set(_rest "")
    foreach(_split ${A_SPLITS})
      string(REPLACE "=" ";" _kv "${_split}")
      list(GET _kv 0 _name)
      list(GET _kv 1 _filter)
      add_test(NAME ${module}_${_name} COMMAND ${t} --gtest_filter=${_filter})
      string(APPEND _rest ":${_filter}")
    endforeach()
    foreach(_filter ${A_EXCLUDE})  # EXCLUDE GtestFilter ...: not run by any entry made here
      string(APPEND _rest ":${_filter}")
    endforeach()
    string(SUBSTRING "${_rest}" 1 -1 _rest)
    add_test(NAME ${module} COMMAND ${t} --gtest_filter=-${_rest})
  else()
    add_test(NAME ${module} COMMAND ${t})
  endif()
  get_property(_tests DIRECTORY PROPERTY TESTS)
  set_tests_properties(${_tests} PROPERTIES TIMEOUT ${A_TIMEOUT} LABELS "${module};${A_LABELS}"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
endfunction()
