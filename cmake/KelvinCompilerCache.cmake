# C++ compiles go through ccache when it is installed (scripts/setup.sh installs it; KELVIN_CCACHE=OFF
# turns it off). CCACHE_BASEDIR is the source tree, so build trees under it share hits: test.sh's
# CPU-only build reuses the default build's objects for every file that preprocesses the same.
option(KELVIN_CCACHE "Compile C++ through ccache when it is installed" ON)
set(KELVIN_COMPILER_CACHE "none")
if(KELVIN_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(KELVIN_CCACHE_PROGRAM ccache)
  if(KELVIN_CCACHE_PROGRAM)
    set(CMAKE_CXX_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}
        ${KELVIN_CCACHE_PROGRAM})
    set(KELVIN_COMPILER_CACHE ${KELVIN_CCACHE_PROGRAM})
  endif()
endif()
