# CUDA back ends: compiled when nvcc exists, even on a machine without a GPU.
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
# CMake 3.25 does not know nvcc's C++20 flag ("requires the language dialect CUDA20"); newer
# CMake sets these itself.
if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set_property(TARGET sparse_mla PROPERTY CUDA_ARCHITECTURES ${SMLA_CUDA_ARCHS})
set_property(TARGET sparse_mla PROPERTY CUDA_SEPARABLE_COMPILATION OFF)

file(GLOB_RECURSE SMLA_CUDA_SOURCES CONFIGURE_DEPENDS
  src/cuda/*.cu src/cuda/*.cpp)
# The Hopper kernels (wgmma, setmaxnreg) exist only as sm_90a code: their instantiation units
# are compiled for that one architecture, and only when SMLA_CUDA_ARCHS lists 90a.
file(GLOB SMLA_SM90A_SOURCES CONFIGURE_DEPENDS src/cuda/instantiations/sm90a_*.cu)
if(SMLA_SM90A_SOURCES)
  list(REMOVE_ITEM SMLA_CUDA_SOURCES ${SMLA_SM90A_SOURCES})
endif()
set(SMLA_CUDA_OPTIONS --expt-relaxed-constexpr -lineinfo -Xptxas=-warn-spills)
target_sources(sparse_mla PRIVATE ${SMLA_CUDA_SOURCES})
target_compile_definitions(sparse_mla PUBLIC SMLA_WITH_CUDA=1)
target_compile_options(sparse_mla PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${SMLA_CUDA_OPTIONS}>)
if(SMLA_SM90A_SOURCES AND SMLA_CUDA_ARCHS MATCHES "(^|;)90a($|;)")
  add_library(sparse_mla_sm90a OBJECT ${SMLA_SM90A_SOURCES})
  set_property(TARGET sparse_mla_sm90a PROPERTY CUDA_ARCHITECTURES 90a)
  target_include_directories(sparse_mla_sm90a PRIVATE
    ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(sparse_mla_sm90a PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${SMLA_CUDA_OPTIONS}>)
  target_sources(sparse_mla PRIVATE $<TARGET_OBJECTS:sparse_mla_sm90a>)
  target_compile_definitions(sparse_mla PRIVATE SMLA_WITH_SM90A=1)
  message(STATUS "sparse-mla: Hopper (sm_90a) kernels ON")
else()
  message(STATUS "sparse-mla: Hopper (sm_90a) kernels OFF (SMLA_CUDA_ARCHS has no 90a)")
endif()
target_link_libraries(sparse_mla PUBLIC CUDA::cudart)
