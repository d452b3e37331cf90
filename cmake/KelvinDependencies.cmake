# Finds the system libraries Kelvin is built on (Debian 12 packages; see scripts/setup.sh).
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(absl REQUIRED)
find_package(Threads REQUIRED)

# OpenBLAS: Debian installs cblas.h under an openblas-<threading> include folder.
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_path(KELVIN_CBLAS_INCLUDE_DIR cblas.h
          PATH_SUFFIXES openblas-pthread openblas openblas-openmp
          HINTS /usr/include/x86_64-linux-gnu /usr/include)
if(NOT KELVIN_CBLAS_INCLUDE_DIR)
  message(FATAL_ERROR "cblas.h not found: install libopenblas-dev (scripts/setup.sh does).")
endif()
add_library(kelvin_blas INTERFACE)
target_include_directories(kelvin_blas INTERFACE ${KELVIN_CBLAS_INCLUDE_DIR})
target_link_libraries(kelvin_blas INTERFACE ${BLAS_LIBRARIES})

if(KELVIN_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(KELVIN_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

find_package(nlohmann_json REQUIRED)  # safetensors headers, Hugging Face config.json

if(NOT KELVIN_CORE_ONLY)
  # MPI (OpenMPI): KELVIN_MPI_CHECK decodes MPI errors; parallel/ builds its backend on it.
  find_package(MPI REQUIRED COMPONENTS C)
  find_package(Protobuf REQUIRED)  # job configs (configs/kelvin.proto)
endif()
