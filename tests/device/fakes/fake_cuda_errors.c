/* The stand-in driver's error names (cuGetErrorName), for the result codes it returns
 * (fake_cuda_internal.h). */
#include "fake_cuda_internal.h"

CUresult cuGetErrorName(CUresult error, const char **name) {
  switch (error) {
    case kOk:
      *name = "CUDA_SUCCESS";
      return kOk;
    case kInvalidValue:
      *name = "CUDA_ERROR_INVALID_VALUE";
      return kOk;
    case kNotInitialized:
      *name = "CUDA_ERROR_NOT_INITIALIZED";
      return kOk;
    case kInvalidContext:
      *name = "CUDA_ERROR_INVALID_CONTEXT";
      return kOk;
    case kMapFailed:
      *name = "CUDA_ERROR_MAP_FAILED";
      return kOk;
    case kOutOfMemory:
      *name = "CUDA_ERROR_OUT_OF_MEMORY";
      return kOk;
    case kInvalidHandle:
      *name = "CUDA_ERROR_INVALID_HANDLE";
      return kOk;
    case kNotReady:
      *name = "CUDA_ERROR_NOT_READY";
      return kOk;
    case kInvalidImage:
      *name = "CUDA_ERROR_INVALID_IMAGE";
      return kOk;
    case kNotFound:
      *name = "CUDA_ERROR_NOT_FOUND";
      return kOk;
    case kIllegalAddress:
      *name = "CUDA_ERROR_ILLEGAL_ADDRESS";
      return kOk;
    case kUnknown:
      *name = "CUDA_ERROR_UNKNOWN";
      return kOk;
    default:
      return kInvalidValue;
  }
}
