# libFuzzer targets: every tools/dev/fuzz/fuzz_*.cpp becomes an executable of the same name, built
# when KESTREL_FUZZ=ON (tools/dev/fuzz/run.sh configures build-fuzz that way: clang,
# KESTREL_CUDA=OFF, KESTREL_TESTS=OFF). Included before the library is defined, so that the
# flags below reach every object of it; the targets themselves are added at the end of the
# top-level directory (DEFER), when the libraries they link exist.
#
#   library and server objects: -fsanitize=fuzzer-no-link,address,undefined (coverage, no main)
#   the fuzz targets:           -fsanitize=fuzzer,address,undefined (libFuzzer's main)
#
# -O1 and line tables only: the fuzz build compiles the whole library on 2 cores in CI, and a
# sanitizer report needs file:line, not full debug info. Assertions stay on (no NDEBUG) when the
# build type is the default one run.sh picks ("Fuzz", which adds no flags of its own).
if(NOT KESTREL_FUZZ)
  return()
endif()
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "KESTREL_FUZZ=ON needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++ "
                      "-DCMAKE_C_COMPILER=clang (found ${CMAKE_CXX_COMPILER_ID})")
endif()
set(KESTREL_FUZZ_SANITIZERS "address,undefined")
add_compile_options(-fsanitize=fuzzer-no-link,${KESTREL_FUZZ_SANITIZERS} -fno-omit-frame-pointer
  -fno-sanitize-recover=undefined -O1 -gline-tables-only)
# Every library and program the build links (the CLI, the benchmarks) needs the sanitizer
# runtimes; only the fuzz targets get libFuzzer's main (below).
add_link_options(-fsanitize=${KESTREL_FUZZ_SANITIZERS})

function(kestrel_add_fuzzers)
  file(GLOB fuzz_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tools/dev/fuzz/fuzz_*.cpp)
  set(names "")
  foreach(src ${fuzz_sources})
    get_filename_component(name ${src} NAME_WE)
    add_executable(${name} ${src})
    target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tools ${CMAKE_SOURCE_DIR}/tools/dev/fuzz)
    # Targets that include the server's headers link its static library (which brings the whole
    # runtime along); the others only the runtime.
    file(STRINGS ${src} server_includes REGEX "#include \"server/")
    if(server_includes AND TARGET kestrel_server)
      target_link_libraries(${name} PRIVATE kestrel_server)
    else()
      target_link_libraries(${name} PRIVATE kestrel_static)
    endif()
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
    list(APPEND names ${name})
  endforeach()
  # The seed corpus: generated, never copied from testdata (gen_seeds.cpp).
  add_executable(kestrel_fuzz_seeds ${CMAKE_SOURCE_DIR}/tools/dev/fuzz/gen_seeds.cpp)
  target_link_libraries(kestrel_fuzz_seeds PRIVATE kestrel_static)
  set_target_properties(kestrel_fuzz_seeds PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
  add_custom_target(fuzz DEPENDS ${names} kestrel_fuzz_seeds)
  message(STATUS "Kestrel: fuzz targets ${names}")
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL kestrel_add_fuzzers)
