# Build options. Every option has a default that works on a fresh machine of our kind.
option(SMLA_BUILD_TESTS "Build the GoogleTest suites (needs SMLA_BUILD_CLI for cli_test)" ON)
option(SMLA_BUILD_CLI "Build the sparse-mla command-line tool (needs nlohmann_json)" ON)
option(SMLA_BUILD_PYTHON "Build the torch extension (set by scikit-build-core)" OFF)
option(SMLA_SANITIZE "Build host code with AddressSanitizer and UBSan" OFF)
# -march=native suits binaries built where they run (make run/test); a wheel may be installed on
# another CPU, so the Python build leaves it off.
if(SMLA_BUILD_PYTHON)
  set(SMLA_NATIVE_DEFAULT OFF)
else()
  set(SMLA_NATIVE_DEFAULT ON)
endif()
option(SMLA_NATIVE "Compile host code for this machine's CPU (-march=native)" ${SMLA_NATIVE_DEFAULT})
set(SMLA_ENABLE_CUDA "AUTO" CACHE STRING "Build CUDA back ends: ON, OFF or AUTO (when nvcc exists)")
# 90a also compiles the portable kernels for sm_90a (clusters, programmatic launch); the kernel
# table's sm90a rows (the Hopper kernels, cmake/kernels.cmake) build only with 90a.
set(SMLA_CUDA_ARCHS "80;90a" CACHE STRING "CUDA architectures (80: A100 and later; 90a: H100/H200)")

if(SMLA_ENABLE_CUDA STREQUAL "AUTO")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(SMLA_ENABLE_CUDA ON)
  else()
    set(SMLA_ENABLE_CUDA OFF)
  endif()
endif()
message(STATUS "sparse-mla: CUDA back ends ${SMLA_ENABLE_CUDA}")

# A CBLAS for the CLI's fp32 GEMM ceiling (OpenBLAS preferred: the reference BLAS would flatter
# the CPU back end).
find_library(SMLA_BLAS_LIBRARY NAMES openblas)
if(SMLA_BLAS_LIBRARY)
  message(STATUS "sparse-mla: GEMM ceiling measured with ${SMLA_BLAS_LIBRARY}")
endif()

function(smla_apply_host_flags target)
  if(SMLA_SANITIZE)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
  if(SMLA_NATIVE AND NOT SMLA_SANITIZE AND CMAKE_BUILD_TYPE STREQUAL "Release")
    # The CPU back end relies on auto-vectorised inner loops (AVX2/FMA where the CPU has them).
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O3 -march=native>)
  endif()
endfunction()
