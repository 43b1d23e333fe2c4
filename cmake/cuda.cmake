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
target_sources(sparse_mla PRIVATE ${SMLA_CUDA_SOURCES})
target_compile_definitions(sparse_mla PUBLIC SMLA_WITH_CUDA=1)
target_compile_options(sparse_mla PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo -Xptxas=-warn-spills>)
target_link_libraries(sparse_mla PUBLIC CUDA::cudart)
