# Finds the system libraries Kelvin is built on (Debian 12 packages; see scripts/setup.sh).
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(absl REQUIRED)
find_package(Threads REQUIRED)

# OpenBLAS, its OpenMP build: it then shares libgomp's thread pool with Kelvin's OpenMP kernels.
# (The pthreads build keeps its own threads, which fight libgomp's spinning workers for the cores:
# measured here, bf16 GEMM ran at 0.5x.) Debian puts each build in an openblas-<threading> folder.
find_library(KELVIN_OPENBLAS_LIBRARY openblas
             HINTS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp)
find_path(KELVIN_CBLAS_INCLUDE_DIR cblas.h
          HINTS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp)
if(NOT KELVIN_OPENBLAS_LIBRARY OR NOT KELVIN_CBLAS_INCLUDE_DIR)
  message(FATAL_ERROR "OpenBLAS (OpenMP build) not found: install libopenblas-openmp-dev "
                      "(scripts/setup.sh does), or set KELVIN_OPENBLAS_LIBRARY and "
                      "KELVIN_CBLAS_INCLUDE_DIR.")
endif()
add_library(kelvin_blas INTERFACE)
target_include_directories(kelvin_blas INTERFACE ${KELVIN_CBLAS_INCLUDE_DIR})
target_link_libraries(kelvin_blas INTERFACE ${KELVIN_OPENBLAS_LIBRARY})

if(KELVIN_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(KELVIN_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

find_package(nlohmann_json REQUIRED)  # safetensors headers, Hugging Face config.json

# PCRE2 (8-bit code units, with JIT): the tokenizer's pre-tokenizer regexes (data/tokenizer/).
find_library(KELVIN_PCRE2_LIBRARY pcre2-8)
find_path(KELVIN_PCRE2_INCLUDE_DIR pcre2.h)
if(NOT KELVIN_PCRE2_LIBRARY OR NOT KELVIN_PCRE2_INCLUDE_DIR)
  message(FATAL_ERROR "PCRE2 not found: install libpcre2-dev (scripts/setup.sh does), or set "
                      "KELVIN_PCRE2_LIBRARY and KELVIN_PCRE2_INCLUDE_DIR.")
endif()
add_library(kelvin_pcre2 INTERFACE)
target_include_directories(kelvin_pcre2 INTERFACE ${KELVIN_PCRE2_INCLUDE_DIR})
target_link_libraries(kelvin_pcre2 INTERFACE ${KELVIN_PCRE2_LIBRARY})

if(NOT KELVIN_CORE_ONLY)
  # MPI (OpenMPI): KELVIN_MPI_CHECK decodes MPI errors; parallel/ builds its backend on it.
  find_package(MPI REQUIRED COMPONENTS C)
  find_package(Protobuf REQUIRED)  # job configs (configs/kelvin.proto)
  find_package(CLI11 REQUIRED)     # the kelvin command line (launcher/)
endif()
