# The C++ SDK: what `cmake --install` puts under a prefix P, so that a
# program outside this tree can train against a job's servers with
#   find_package(kubeps 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE kubeps::kv)
#
#   P/lib/libkubeps.so.0.1.0 (SONAME libkubeps.so.0.1), libkubeps.so
#   P/include/kubeps/worker-agent/kv/kv_worker.h, placement.h, rollback_copies.h,
#                                    sdk_export.h
#   P/include/kubeps/common/status.h, resend_policy.h, step_membership.h
#   P/lib/cmake/kubeps/kubepsConfig.cmake, kubepsConfigVersion.cmake,
#                      kubepsTargets.cmake (+ -relwithdebinfo.cmake)
#
# Headers keep their paths in the tree under include/kubeps/, and the target
# puts P/include/kubeps on the include path: the same #include lines
# ("worker-agent/kv/kv_worker.h") work in the tree and outside it (the
# headers include each other that way), and generic names such as
# common/status.h stay out of the shared P/include.
#
# The library holds the KV client's objects and what they use of common/,
# the scheduler client and the generated protocol, all compiled with hidden
# visibility: it exports KVWorker, PlaceTensors and RollbackCopies (KUBEPS_EXPORT), and a
# version script drops the template instantiations that the headers of the
# C++ library, gRPC and protobuf make visible. gRPC, protobuf and
# prometheus-cpp are linked privately (shared, from the system): a program
# linking kubeps::kv needs neither their headers nor their CMake packages.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KUBEPS_SDK_SYMBOLS ${CMAKE_CURRENT_SOURCE_DIR}/libkubeps.map)
add_library(kubeps_sdk SHARED $<TARGET_OBJECTS:kubeps_kv_objects>)
add_library(kubeps::kv ALIAS kubeps_sdk)
target_link_libraries(kubeps_sdk PRIVATE kubeps_common kubeps_proto kubeps_scheduler_client)
target_link_options(kubeps_sdk PRIVATE
  -Wl,--as-needed -Wl,--no-undefined -Wl,--version-script=${KUBEPS_SDK_SYMBOLS})
target_include_directories(kubeps_sdk INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/kubeps>)
target_compile_features(kubeps_sdk INTERFACE cxx_std_17)
set_target_properties(kubeps_sdk PROPERTIES
  OUTPUT_NAME kubeps
  EXPORT_NAME kv
  VERSION ${PROJECT_VERSION}
  # 0.x: a minor version may break the ABI.
  SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib
  LINK_DEPENDS ${KUBEPS_SDK_SYMBOLS})

install(TARGETS kubeps_sdk EXPORT kubepsTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# kv_worker.h, rollback_copies.h and exactly what they include
# (tests/integration/test_cpp_sdk.py compiles each against these alone).
install(FILES kv_worker.h placement.h rollback_copies.h sdk_export.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kubeps/worker-agent/kv)
install(FILES ${PROJECT_SOURCE_DIR}/common/status.h ${PROJECT_SOURCE_DIR}/common/resend_policy.h
  ${PROJECT_SOURCE_DIR}/common/step_membership.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kubeps/common)

set(KUBEPS_CONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kubeps)
install(EXPORT kubepsTargets NAMESPACE kubeps:: DESTINATION ${KUBEPS_CONFIG_DIR})
configure_package_config_file(kubepsConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/kubepsConfig.cmake
  INSTALL_DESTINATION ${KUBEPS_CONFIG_DIR})
# 0.x: 0.1.z satisfies find_package(kubeps 0.1), 0.2 does not.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/kubepsConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kubepsConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/kubepsConfigVersion.cmake
  DESTINATION ${KUBEPS_CONFIG_DIR})
