// Stand-in for the header that CUDA builds of torch generate and CPU wheels lack; used by tools/nvcc_check.py only.
#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS
