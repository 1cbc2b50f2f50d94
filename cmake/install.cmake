# cmake --install: libkestrel (shared and static), kestrel.h/kestrel.hpp, kestrel.pc, the CMake
# package (find_package(Kestrel)) and the kestrel CLI.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS kestrel_shared kestrel_static EXPORT KestrelTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kestrel_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES runtime/include/kestrel.h runtime/include/kestrel.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(KESTREL_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Kestrel)
install(EXPORT KestrelTargets NAMESPACE Kestrel:: DESTINATION ${KESTREL_CMAKE_DIR})
configure_package_config_file(cmake/KestrelConfig.cmake.in ${CMAKE_BINARY_DIR}/KestrelConfig.cmake
  INSTALL_DESTINATION ${KESTREL_CMAKE_DIR})
# 0.x: the minor version is the compatibility line (struct_size keeps old callers working within it).
write_basic_package_version_file(${CMAKE_BINARY_DIR}/KestrelConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/KestrelConfig.cmake ${CMAKE_BINARY_DIR}/KestrelConfigVersion.cmake
  DESTINATION ${KESTREL_CMAKE_DIR})

# pkg-config: the prefix is found from the .pc file's own folder. kestrel.pc: shared, or with
# --static for `cc -static`; kestrel-static.pc: libkestrel.a with the system libraries shared.
string(REGEX REPLACE "[^/]+" ".." KESTREL_PC_UP "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
set(KESTREL_PC_CUDA_LIBS "")
if(KESTREL_WITH_CUDA)
  set(KESTREL_PC_CUDA_LIBS "-L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lrt")
endif()
configure_file(cmake/kestrel.pc.in ${CMAKE_BINARY_DIR}/kestrel.pc @ONLY)
configure_file(cmake/kestrel-static.pc.in ${CMAKE_BINARY_DIR}/kestrel-static.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/kestrel.pc ${CMAKE_BINARY_DIR}/kestrel-static.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
