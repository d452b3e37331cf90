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

# The build type "Sanitize" (test.sh's parser stage): -O1, ASan's recommended level, with line
# tables for file:line in its reports; about half the compile time of RelWithDebInfo's -O2 -g.
set(CMAKE_C_FLAGS_SANITIZE "-O1 -g1 -DNDEBUG")
set(CMAKE_CXX_FLAGS_SANITIZE "-O1 -g1 -DNDEBUG")

if(KELVIN_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>)
  add_link_options(-fsanitize=address,undefined)
endif()
