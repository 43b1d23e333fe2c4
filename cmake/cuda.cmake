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
# The host-only policy sources are in every build (CMakeLists.txt: SMLA_CUDA_POLICY_SOURCES).
list(REMOVE_ITEM SMLA_CUDA_SOURCES ${SMLA_CUDA_POLICY_SOURCES})
# CUDA sources of the Hopper kernels (src/cuda/sm90a/) compile for sm_90a only, with the kernel
# table's sm90a rows (cmake/kernels.cmake).
list(FILTER SMLA_CUDA_SOURCES EXCLUDE REGEX "/src/cuda/sm90a/.*\\.cu$")
file(GLOB_RECURSE SMLA_CUDA_SM90A_SOURCES CONFIGURE_DEPENDS src/cuda/sm90a/*.cu)
target_sources(sparse_mla PRIVATE ${SMLA_CUDA_SOURCES})
target_compile_definitions(sparse_mla PUBLIC SMLA_WITH_CUDA=1)
target_compile_options(sparse_mla PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo -Xptxas=-warn-spills>)
target_link_libraries(sparse_mla PUBLIC CUDA::cudart)

# The kernel instantiations and their registry, generated from the kernel table (SMLA_KERNELS).
smla_add_kernel_table(sparse_mla ${SMLA_CUDA_SM90A_SOURCES})
