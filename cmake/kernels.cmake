# The CUDA kernel table's build side. src/cuda/instantiations/kernels.py lists every kernel
# configuration once; SMLA_KERNELS picks the rows this build compiles, and generate.py writes
# their instantiation units and the registry arrays (src/cuda/kernel_registry.h) into the build
# folder at configure time. Nothing generated is committed, so nothing can be stale: editing the
# table or the generator re-runs CMake (CMAKE_CONFIGURE_DEPENDS), and the generator rewrites only
# files whose text changed, so a reconfigure recompiles only what changed.
set(SMLA_KERNELS "all" CACHE STRING
  "CUDA kernels to build: all, deepseek-v4 (d_qk 512 only), or comma-separated name globs \
(src/cuda/instantiations/generate.py --list prints the names)")

set(SMLA_KERNEL_TABLE_DIR ${CMAKE_CURRENT_LIST_DIR}/../src/cuda/instantiations)
cmake_path(NORMAL_PATH SMLA_KERNEL_TABLE_DIR)
set(SMLA_KERNELS_DIR ${PROJECT_BINARY_DIR}/generated/kernels)

# Writes the units and the registry for SMLA_KERNELS and SMLA_CUDA_ARCHS, and adds them to
# `target`. Rows of arch sm80 compile with the target's architectures; rows of arch sm90a (Hopper
# kernels) compile for sm_90a only, in an object library of their own together with the other
# sm_90a-only sources given after `target`, and exist only in builds whose SMLA_CUDA_ARCHS holds
# 90a.
function(smla_add_kernel_table target)
  set(sm90a_sources ${ARGN})
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} ${SMLA_KERNEL_TABLE_DIR}/generate.py
      --kernels "${SMLA_KERNELS}" --cuda-archs "${SMLA_CUDA_ARCHS}" --out ${SMLA_KERNELS_DIR}
    RESULT_VARIABLE result ERROR_VARIABLE error)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "sparse-mla: cannot generate the kernel sources: ${error}")
  endif()
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
    ${SMLA_KERNEL_TABLE_DIR}/kernels.py ${SMLA_KERNEL_TABLE_DIR}/generate.py)
  include(${SMLA_KERNELS_DIR}/kernels.cmake)
  message(STATUS "sparse-mla: SMLA_KERNELS=${SMLA_KERNELS}: "
    "${SMLA_KERNELS_BUILT} of ${SMLA_KERNELS_TOTAL} kernel configurations")

  target_include_directories(${target} PRIVATE ${PROJECT_BINARY_DIR}/generated)
  target_sources(${target} PRIVATE ${SMLA_KERNEL_UNITS_SM80})
  if("sm90a" IN_LIST SMLA_KERNEL_ARCHS AND (SMLA_KERNEL_UNITS_SM90A OR sm90a_sources))
    add_library(${target}_sm90a OBJECT ${SMLA_KERNEL_UNITS_SM90A} ${sm90a_sources})
    set_target_properties(${target}_sm90a PROPERTIES CUDA_ARCHITECTURES 90a
      POSITION_INDEPENDENT_CODE ON)
    foreach(property INCLUDE_DIRECTORIES COMPILE_DEFINITIONS COMPILE_OPTIONS)
      set_property(TARGET ${target}_sm90a PROPERTY ${property}
        $<TARGET_PROPERTY:${target},${property}>)
    endforeach()
    target_sources(${target} PRIVATE $<TARGET_OBJECTS:${target}_sm90a>)
  endif()
endfunction()

# The generator's tests (tests/kernel_table/): the table's names, SMLA_KERNELS presets and globs,
# the arch filter and the files written. CPU-only (label cpu), in every build that has Python.
function(smla_add_kernel_table_test)
  find_package(Python3 COMPONENTS Interpreter)
  if(NOT Python3_Interpreter_FOUND)
    message(STATUS "sparse-mla: no Python 3, so no kernel_table test")
    return()
  endif()
  add_test(NAME kernel_table
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/kernel_table/kernel_table_test.py)
  set_tests_properties(kernel_table PROPERTIES LABELS cpu)
endfunction()
