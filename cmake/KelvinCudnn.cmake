# Resolves KELVIN_CUDNN (AUTO/ON/OFF) into KELVIN_WITH_CUDNN: the cuDNN attention core
# (ssa/cudnn_attention.cc) needs CUDA, cudnn.h and the header-only cuDNN frontend, which
# scripts/fetch_cudnn_frontend.sh unpacks into third_party/cudnn_frontend/include
# (KELVIN_CUDNN_FRONTEND_DIR elsewhere). libcudnn.so.9 itself is opened at run time
# (the frontend's dynamic loading), so a build with cuDNN still runs where the library is missing:
# the cuDNN core then reports itself unavailable and AUTO keeps Kelvin's own kernel.
set(KELVIN_CUDNN AUTO CACHE STRING
    "Build the cuDNN attention core: AUTO (when CUDA, cudnn.h and the frontend are found), ON, OFF")
set_property(CACHE KELVIN_CUDNN PROPERTY STRINGS AUTO ON OFF)
set(KELVIN_CUDNN_FRONTEND_DIR "${CMAKE_SOURCE_DIR}/third_party/cudnn_frontend/include" CACHE PATH
    "The cuDNN frontend's include/ (scripts/fetch_cudnn_frontend.sh puts it in the default)")

string(TOUPPER "${KELVIN_CUDNN}" _kelvin_cudnn_mode)
if(NOT _kelvin_cudnn_mode MATCHES "^(AUTO|ON|OFF|TRUE|FALSE|1|0|YES|NO)$")
  message(FATAL_ERROR "KELVIN_CUDNN=${KELVIN_CUDNN} is not one of AUTO, ON, OFF.")
endif()

set(KELVIN_WITH_CUDNN OFF)
set(KELVIN_CUDNN_SUMMARY "off (KELVIN_CUDNN=${KELVIN_CUDNN})")
if(NOT _kelvin_cudnn_mode MATCHES "^(OFF|FALSE|0|NO)$")
  set(_kelvin_cudnn_missing "")
  if(NOT KELVIN_WITH_CUDA)
    set(_kelvin_cudnn_missing "CUDA is off")
  else()
    find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV CUDNN_HOME
              PATH_SUFFIXES include)
    if(NOT CUDNN_INCLUDE_DIR)
      set(_kelvin_cudnn_missing "cudnn.h not found (set CUDNN_HOME)")
    elseif(NOT EXISTS "${KELVIN_CUDNN_FRONTEND_DIR}/cudnn_frontend.h")
      set(_kelvin_cudnn_missing
          "the cuDNN frontend headers are not in ${KELVIN_CUDNN_FRONTEND_DIR} (run "
          "scripts/fetch_cudnn_frontend.sh, or set KELVIN_CUDNN_FRONTEND_DIR)")
    endif()
  endif()
  if(_kelvin_cudnn_missing STREQUAL "")
    set(KELVIN_WITH_CUDNN ON)
    file(STRINGS "${KELVIN_CUDNN_FRONTEND_DIR}/cudnn_frontend_version.h" _kelvin_fe_version
         REGEX "define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION")
    string(REGEX REPLACE "[^0-9;]" "" _kelvin_fe_version "${_kelvin_fe_version}")
    string(REPLACE ";" "." _kelvin_fe_version "${_kelvin_fe_version}")
    set(KELVIN_CUDNN_SUMMARY "on (frontend ${_kelvin_fe_version}, cudnn.h in ${CUDNN_INCLUDE_DIR})")
    add_library(kelvin_cudnn_frontend INTERFACE)
    # SYSTEM: the frontend's own warnings are not Kelvin's (-Werror).
    target_include_directories(kelvin_cudnn_frontend SYSTEM INTERFACE ${KELVIN_CUDNN_FRONTEND_DIR}
                               ${CUDNN_INCLUDE_DIR})
    target_compile_definitions(kelvin_cudnn_frontend
                               INTERFACE NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING)
    target_link_libraries(kelvin_cudnn_frontend INTERFACE ${CMAKE_DL_LIBS})
  elseif(_kelvin_cudnn_mode MATCHES "^(ON|TRUE|1|YES)$")
    message(FATAL_ERROR "KELVIN_CUDNN=ON but ${_kelvin_cudnn_missing}; or configure with "
                        "-DKELVIN_CUDNN=OFF (Kelvin's own attention kernel only).")
  else()
    set(KELVIN_CUDNN_SUMMARY "off: ${_kelvin_cudnn_missing} (KELVIN_CUDNN=AUTO)")
  endif()
endif()
