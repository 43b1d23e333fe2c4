# `cmake --install <build> --prefix P` installs the library as a CMake package:
#   P/include/sparse_mla/*.h                   the public API (nothing from src/)
#   P/lib/libsparse_mla.a                      the library (CPU back ends, and CUDA when built in)
#   P/lib/cmake/sparse_mla/                    sparse_mlaConfig.cmake, its version file and the
#                                              exported target sparse_mla::sparse_mla
# A consumer writes find_package(sparse_mla REQUIRED) and links sparse_mla::sparse_mla. The
# package finds the library's public link dependencies again: Threads, and in a CUDA build the
# CUDA runtime (CUDA::cudart, through find_dependency(CUDAToolkit)). OpenBLAS and nlohmann_json
# are used by the CLI only, which is not installed (nor are the tests or src/verify).
# tests/install_consumer/ is the consumer that ctest builds against an installed tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SMLA_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/sparse_mla")
set(SMLA_INSTALL_COMPONENT sparse_mla_development)

install(TARGETS sparse_mla EXPORT sparse_mlaTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT ${SMLA_INSTALL_COMPONENT}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/sparse_mla
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT ${SMLA_INSTALL_COMPONENT}
  FILES_MATCHING PATTERN "*.h")
install(EXPORT sparse_mlaTargets NAMESPACE sparse_mla::
  DESTINATION ${SMLA_INSTALL_CMAKEDIR} COMPONENT ${SMLA_INSTALL_COMPONENT})

# Recorded in the package for its consumers (sparse_mla_WITH_CUDA, sparse_mla_CUDA_ARCHITECTURES).
set(SMLA_PACKAGE_WITH_CUDA ${SMLA_ENABLE_CUDA})
if(SMLA_ENABLE_CUDA)
  set(SMLA_PACKAGE_CUDA_MAJOR ${CUDAToolkit_VERSION_MAJOR})
  set(SMLA_PACKAGE_CUDA_ARCHS "${SMLA_CUDA_ARCHS}")
else()
  set(SMLA_PACKAGE_CUDA_MAJOR "")
  set(SMLA_PACKAGE_CUDA_ARCHS "")
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/sparse_mlaConfig.cmake.in
  ${PROJECT_BINARY_DIR}/sparse_mlaConfig.cmake
  INSTALL_DESTINATION ${SMLA_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/sparse_mlaConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/sparse_mlaConfig.cmake
  ${PROJECT_BINARY_DIR}/sparse_mlaConfigVersion.cmake
  DESTINATION ${SMLA_INSTALL_CMAKEDIR} COMPONENT ${SMLA_INSTALL_COMPONENT})
