# C++ compiles go through ccache when it is installed (scripts/setup.sh installs it; KELVIN_CCACHE=OFF
# turns it off) and its cache directory is writable. CCACHE_BASEDIR is the source tree, so build
# trees inside it share hits: test.sh's CPU-only build reuses the default build's objects for every
# file that preprocesses the same.
option(KELVIN_CCACHE "Compile C++ through ccache when it is installed" ON)
set(KELVIN_COMPILER_CACHE "none")
if(KELVIN_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(KELVIN_CCACHE_PROGRAM ccache)
  if(KELVIN_CCACHE_PROGRAM)
    execute_process(COMMAND ${KELVIN_CCACHE_PROGRAM} --get-config cache_dir
                    OUTPUT_VARIABLE cache_dir OUTPUT_STRIP_TRAILING_WHITESPACE)
    set(probe "${cache_dir}/kelvin_write_probe")
    # Two calls: the COMMANDs of one execute_process run at once, as a pipeline.
    execute_process(COMMAND ${CMAKE_COMMAND} -E make_directory "${cache_dir}"
                    RESULT_VARIABLE made OUTPUT_QUIET ERROR_QUIET)
    execute_process(COMMAND ${CMAKE_COMMAND} -E touch "${probe}"
                    RESULT_VARIABLE written OUTPUT_QUIET ERROR_QUIET)
    file(REMOVE "${probe}")
    if(made EQUAL 0 AND written EQUAL 0)
      # Relative paths only for a build tree inside the source tree (__FILE__ then names the file
      # from the source root once check.cc drops the leading "../"); elsewhere they stay absolute.
      cmake_path(IS_PREFIX CMAKE_SOURCE_DIR "${CMAKE_BINARY_DIR}" NORMALIZE build_inside_source)
      set(base_dir)
      if(build_inside_source)
        set(base_dir CCACHE_BASEDIR=${CMAKE_SOURCE_DIR})
      endif()
      set(CMAKE_CXX_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env ${base_dir} ${KELVIN_CCACHE_PROGRAM})
      set(KELVIN_COMPILER_CACHE "${KELVIN_CCACHE_PROGRAM} (${cache_dir})")
    else()
      message(STATUS "Kelvin: ccache's cache directory ${cache_dir} is not writable: compiling "
                     "without ccache (set CCACHE_DIR to a writable directory to use it)")
    endif()
  endif()
endif()
