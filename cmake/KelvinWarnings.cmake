# Warning flags for every Kelvin target; -Werror when KELVIN_WERROR is on (CI), sanitizers on demand,
# and the code-generation flags every target shares, which change no result: -fno-math-errno (no
# Kelvin code reads errno after a math call; with errno, sqrt keeps a libm call on a branch and the
# loops around it stay scalar, e.g. the AdamW update) and -fno-trapping-math (Kelvin never enables
# floating-point traps; with them GCC will not vectorise the selects of core/ops/cpu_vector_math.h).
# GCC sanitizer builds add -Wno-maybe-uninitialized: the ASan/UBSan instrumentation confuses GCC's
# flow analysis, and GCC 12 then reports false positives inside libstdc++ itself (<regex> in
# tests/launcher/kelvin_proto_test.cc at RelWithDebInfo), which -Werror makes a failed build. The
# ordinary builds keep the warning, so real uses of uninitialised values are still caught there.
set(KELVIN_GCC_SANITIZE "$<AND:$<BOOL:${KELVIN_SANITIZE}>,$<CXX_COMPILER_ID:GNU>>")
function(kelvin_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${KELVIN_WERROR}>>:-Werror>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,${KELVIN_GCC_SANITIZE}>:-Wno-maybe-uninitialized>
    $<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings -Xcompiler=-Wall,-Wextra>)
endfunction()

add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fno-math-errno>
                    $<$<COMPILE_LANGUAGE:CXX>:-fno-trapping-math>)

set(KELVIN_SANITIZER_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer
    -fno-sanitize-recover=undefined)
if(KELVIN_SANITIZE)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${KELVIN_SANITIZER_FLAGS}>")
endif()
if(KELVIN_SANITIZE OR KELVIN_SANITIZE_INPUTS)
  add_link_options(-fsanitize=address,undefined)
endif()

# kelvin_sanitize_input_readers(SOURCES ...): the code that reads what users hand Kelvin (files,
# job text, checkpoints). With KELVIN_SANITIZE_INPUTS (test.sh's sanitizer stage) only these are
# compiled with ASan+UBSan, at -O1 (ASan's recommended level) with line tables for its reports;
# every other file is compiled as in the ordinary build, so ccache gives that stage the CPU-only
# build's objects. Call it from the CMakeLists.txt that adds the sources' target.
function(kelvin_sanitize_input_readers)
  if(KELVIN_SANITIZE_INPUTS)
    set(flags ${KELVIN_SANITIZER_FLAGS} -O1 -g1)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      list(APPEND flags -Wno-maybe-uninitialized)
    endif()
    set_property(SOURCE ${ARGN} APPEND PROPERTY COMPILE_OPTIONS ${flags})
  endif()
endfunction()
