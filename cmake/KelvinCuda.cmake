# Resolves KELVIN_CUDA (AUTO/ON/OFF) into KELVIN_WITH_CUDA and enables CUDA for sm_90 by default.
include(CheckLanguage)

string(TOUPPER "${KELVIN_CUDA}" _kelvin_cuda_mode)
if(NOT _kelvin_cuda_mode MATCHES "^(AUTO|ON|OFF|TRUE|FALSE|1|0|YES|NO)$")
  message(FATAL_ERROR "KELVIN_CUDA=${KELVIN_CUDA} is not one of AUTO, ON, OFF.")
endif()

set(KELVIN_WITH_CUDA OFF)
if(NOT _kelvin_cuda_mode MATCHES "^(OFF|FALSE|0|NO)$")
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR "${CMAKE_CUDA_ARCHITECTURES}" STREQUAL "")
    # CMake 3.25 + CUDA 13 would default to 75; 'native' fails on machines without a GPU.
    set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures (default sm_90)")
  endif()
  if("${CMAKE_CUDA_ARCHITECTURES}" MATCHES "native|all")
    message(FATAL_ERROR "CMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES}: name the "
                        "architectures explicitly (e.g. 90); 'native' fails without a GPU.")
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    # CMake 3.25 does not know nvcc 13's C++20 dialect flag: tell it.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(KELVIN_WITH_CUDA ON)
  elseif(_kelvin_cuda_mode MATCHES "^(ON|TRUE|1|YES)$")
    message(FATAL_ERROR "KELVIN_CUDA=ON but no CUDA compiler (nvcc) was found. Install the CUDA "
                        "toolkit, set CUDA_HOME or -DCMAKE_CUDA_COMPILER=/path/to/nvcc, or "
                        "configure with -DKELVIN_CUDA=OFF for a CPU-only build.")
  else()
    message(STATUS "Kelvin: nvcc not found; building CPU-only (KELVIN_CUDA=AUTO)")
  endif()
endif()

if(KELVIN_WITH_CUDA)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME
            PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib
               ENV NCCL_HOME PATH_SUFFIXES lib lib64)
  if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
    message(FATAL_ERROR "NCCL not found (nccl.h / libnccl). Set NCCL_HOME, or configure with "
                        "-DKELVIN_CUDA=OFF.")
  endif()
  add_library(kelvin_nccl INTERFACE)
  target_include_directories(kelvin_nccl INTERFACE ${NCCL_INCLUDE_DIR})
  target_link_libraries(kelvin_nccl INTERFACE ${NCCL_LIBRARY})
endif()
