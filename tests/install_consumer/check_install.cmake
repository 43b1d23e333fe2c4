# The ctest test install_consumer (registered in tests/cpp/CMakeLists.txt), run as
# `cmake -D... -P check_install.cmake`: installs the build BUILD_DIR into a fresh prefix under
# WORK_DIR, checks what the prefix holds, then configures this folder's project against the
# prefix alone (find_package(sparse_mla REQUIRED)), builds it and runs it.
foreach(var BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "check_install.cmake: -D${var}=... is required")
  endif()
endforeach()

function(smla_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc COMMAND_ECHO STDOUT)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${what} failed (exit status ${rc})")
  endif()
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
smla_step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# The prefix holds the public headers and nothing of src/, the library, and the package.
file(GLOB_RECURSE installed RELATIVE ${prefix} ${prefix}/*)
list(SORT installed)
string(REPLACE ";" "\n  " installed_text "${installed}")
message("install_consumer: installed under ${prefix}:\n  ${installed_text}")
set(wanted include/sparse_mla/sparse_mla.h lib/cmake/sparse_mla/sparse_mlaConfig.cmake
    lib/cmake/sparse_mla/sparse_mlaConfigVersion.cmake lib/cmake/sparse_mla/sparse_mlaTargets.cmake)
foreach(file ${wanted})
  if(NOT EXISTS ${prefix}/${file})
    message(FATAL_ERROR "install_consumer: ${file} is missing from the install")
  endif()
endforeach()
file(GLOB library ${prefix}/lib*/libsparse_mla.a)
if(NOT library)
  message(FATAL_ERROR "install_consumer: libsparse_mla.a is missing from the install")
endif()
foreach(file ${installed})
  if(file MATCHES "^include/" AND NOT file MATCHES "^include/sparse_mla/[a-z_0-9]+\\.h$")
    message(FATAL_ERROR "install_consumer: ${file} is installed, but only the public headers "
                        "include/sparse_mla/*.h belong under include/")
  endif()
endforeach()

# The consumer sees the prefix only: no package registry, no build tree.
set(configure ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(MAKE_PROGRAM)
  list(APPEND configure -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
if(BUILD_TYPE)
  list(APPEND configure -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
endif()
if(LINKER_FLAGS)
  list(APPEND configure -DCMAKE_EXE_LINKER_FLAGS=${LINKER_FLAGS})
endif()
smla_step("configuring the consumer" ${configure})

smla_step("building the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
smla_step("running the consumer" ${WORK_DIR}/build/install_consumer)
