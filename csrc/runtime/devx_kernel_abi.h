// The kernel ABI: how the core hands an aten op to a kernel the vendor implements itself.
//
// Every kernel is the out= form of an aten overload ("add.out") with a C signature generated from
// the op table (devx_kernels.h, generated from scripts/autogen/ops.yaml and checked against
// torchgen's schemas when torch_devx is built). The same kernel serves the functional, in-place
// and out= variants: the core computes the results' shapes and dtypes (the op's meta function),
// allocates them from the devx caching allocator, and passes them as the outputs; an in-place
// call passes `self` as the output. Arguments map to C by type:
//
//   Tensor            const DevxTensor*          Tensor(a!) (an output)  DevxTensor*
//   Tensor?           const DevxTensor* or NULL  Tensor[] / Tensor?[]    DevxTensorList (NULL items for None)
//   Tensor(a!)[]      DevxTensorList (outputs)   Scalar                  const DevxScalar*
//   int, SymInt       int64_t                    int[], SymInt[]         DevxIntList
//   float             double                     float[]                 DevxFloatList
//   bool              int                        bool[N]                 DevxBoolList
//   ScalarType        DevxDType                  Scalar[]                DevxScalarList
//   str               const char*                Generator?              DevxGenerator (NULL: default)
//   X? of the others  a pointer to X, NULL for None (const int64_t*, const double*, const int*,
//                     const DevxDType*, const DevxScalar*, const DevxIntList*, const char*)
//
// Rules every kernel follows:
//   * It returns DEVX_OK once its work is issued on ctx->stream (it may run later, in stream
//     order); DEVX_DECLINED, having done nothing, for a case it does not handle (a dtype, a
//     layout, an argument value): the core then runs the op as if the vendor had no kernel for it
//     (ATen's kernel of the compute device where there is one, else the CPU fallback); or an
//     error status with the reason in the vendor's last_error(), which becomes a Python
//     exception naming the vendor, the kernel and the reason.
//   * Descriptors, their arrays and strings are valid during the call only: work queued for later
//     copies what it needs. Memory stays allocated until the stream has run the work issued on it.
//   * Inputs and outputs may overlap only where the aten op allows it: an output may be the very
//     same tensor as an input (in-place calls pass `self` as `out`).
//   * A tensor with device DEVX_HOST_SCALAR is a 0-dim CPU tensor (a Python number wrapped by
//     PyTorch, `x * torch.tensor(2.0)`): its data is host memory, read it when issuing.
//   * An output the call does not ask for (convolution_backward's gradients masked off by
//     output_mask) is NULL.
//   * Outputs whose size depends on the data (nonzero, masked_select, unique) arrive with size 0
//     in their first dimension; the kernel gives them their size with ctx->resize_output.
// Include guards, not #pragma once: the installed copies may meet these.
#ifndef DEVX_KERNEL_ABI_H
#define DEVX_KERNEL_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "vendor_types.h"

#ifdef __cplusplus
extern "C" {
#endif

// Bumped whenever a type below or a kernel signature in devx_kernels.h changes incompatibly.
#define DEVX_KERNEL_ABI_VERSION 1

typedef enum DevxDType {
  DEVX_BOOL = 0,
  DEVX_UINT8 = 1,
  DEVX_INT8 = 2,
  DEVX_INT16 = 3,
  DEVX_INT32 = 4,
  DEVX_INT64 = 5,
  DEVX_FLOAT16 = 6,
  DEVX_BFLOAT16 = 7,
  DEVX_FLOAT32 = 8,
  DEVX_FLOAT64 = 9,
  DEVX_COMPLEX64 = 10,
  DEVX_COMPLEX128 = 11,
} DevxDType;

#define DEVX_HOST_SCALAR (-1)

typedef struct DevxTensor {
  void* data;              // the first element (storage offset applied)
  DevxDType dtype;
  int32_t ndim;
  const int64_t* sizes;    // ndim entries
  const int64_t* strides;  // ndim entries, in elements
  int32_t device;          // devx device index, or DEVX_HOST_SCALAR
  int32_t reserved;
} DevxTensor;

typedef struct DevxTensorList {
  DevxTensor* const* items;  // an item is NULL for a None of a Tensor?[]
  int64_t len;
} DevxTensorList;

typedef struct DevxIntList {
  const int64_t* data;
  int64_t len;
} DevxIntList;

typedef struct DevxFloatList {
  const double* data;
  int64_t len;
} DevxFloatList;

typedef struct DevxBoolList {
  const uint8_t* data;  // 0 or 1
  int64_t len;
} DevxBoolList;

typedef enum DevxScalarKind {
  DEVX_SCALAR_BOOL = 0,
  DEVX_SCALAR_INT = 1,
  DEVX_SCALAR_FLOAT = 2,
  DEVX_SCALAR_COMPLEX = 3,
} DevxScalarKind;

typedef struct DevxScalar {
  DevxScalarKind kind;
  int64_t i;    // BOOL (0/1) and INT
  double f;     // FLOAT, and the real part of COMPLEX
  double imag;  // COMPLEX
} DevxScalar;

typedef struct DevxScalarList {
  const DevxScalar* data;
  int64_t len;
} DevxScalarList;

// A random number generator of the devx device (torch.Generator("devx") or the default one).
typedef struct DevxGenerator_* DevxGenerator;

typedef struct DevxKernelContext DevxKernelContext;
struct DevxKernelContext {
  int device;               // the devx device the op runs on (current for the call)
  DevxStreamHandle stream;  // where to issue the work: the current devx stream
  // Device memory for the kernel's own use until the stream has run the work issued so far.
  DevxStatus (*workspace)(DevxKernelContext* ctx, size_t bytes, void** ptr);
  // Gives output `out` (one of this call's output descriptors) contiguous sizes `sizes`,
  // reallocating it from the devx allocator; `out` is updated (data, ndim, sizes, strides).
  DevxStatus (*resize_output)(DevxKernelContext* ctx, DevxTensor* out, int32_t ndim, const int64_t* sizes);
  // Reserves `increment` counter values of `generator`'s Philox stream (NULL: the device's
  // default generator), as CUDA's philox_cuda_state does: draws of the kernel use `seed` and the
  // counters from `offset` on, so that seeding and get/set_rng_state work as on CUDA.
  DevxStatus (*philox_state)(DevxKernelContext* ctx, DevxGenerator generator, uint64_t increment, uint64_t* seed,
                             uint64_t* offset);
  void* core;  // the core's own state for this call
};

// One entry of a vendor's kernel table: an overload of devx_kernels.h ("add.out") and its
// function, of that overload's type. Tables end with {NULL, NULL}.
typedef struct DevxVendorKernel {
  const char* op;
  void* fn;
} DevxVendorKernel;

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // DEVX_KERNEL_ABI_H
