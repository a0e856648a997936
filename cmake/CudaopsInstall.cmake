# Install rules: the library, its headers, a CMake package (cudaops::cudaops) and a pkg-config file.
include(CMakePackageConfigHelpers)

set(CUDAOPS_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/cudaops)

install(TARGETS cudaops
  EXPORT cudaopsTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/cudaops
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/cudaops/export.h
              ${PROJECT_BINARY_DIR}/include/cudaops/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cudaops)
install(EXPORT cudaopsTargets NAMESPACE cudaops:: DESTINATION ${CUDAOPS_INSTALL_CMAKEDIR})

# A static libcudaops carries the CUDA runtime in its link interface, found by the config.
if(BUILD_SHARED_LIBS)
  set(CUDAOPS_NEEDS_CUDATOOLKIT OFF)
else()
  set(CUDAOPS_NEEDS_CUDATOOLKIT ON)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/cudaopsConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cudaopsConfig.cmake
  INSTALL_DESTINATION ${CUDAOPS_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cudaopsConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cudaopsConfig.cmake
              ${PROJECT_BINARY_DIR}/cudaopsConfigVersion.cmake
        DESTINATION ${CUDAOPS_INSTALL_CMAKEDIR})

# pkg-config: a static libcudaops needs the static CUDA runtime after it.
if(BUILD_SHARED_LIBS)
  set(CUDAOPS_PC_LIBS_EXTRA "")
  set(CUDAOPS_PC_CFLAGS "")
else()
  set(CUDAOPS_PC_LIBS_EXTRA "-L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lpthread -lrt")
  set(CUDAOPS_PC_CFLAGS "-DCUDAOPS_STATIC_DEFINE")
endif()
# Relocatable: the prefix is found from where the .pc file lies.
file(RELATIVE_PATH CUDAOPS_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
configure_file(${PROJECT_SOURCE_DIR}/cmake/cudaops.pc.in ${PROJECT_BINARY_DIR}/cudaops.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cudaops.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
