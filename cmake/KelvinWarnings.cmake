# Warning flags for every Kelvin target; -Werror when KELVIN_WERROR is on (CI), sanitizers on demand.
function(kelvin_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${KELVIN_WERROR}>>:-Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings -Xcompiler=-Wall,-Wextra>)
endfunction()

if(KELVIN_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>)
  add_link_options(-fsanitize=address,undefined)
endif()
