// Convolution as im2col + GEMM, shared by the forward and backward kernels. Every case is a
// (not transposed) convolution x -> y seen from one side or the other: forward is y = W * x,
// the input gradient dx = W^T * dy, the weight gradient dW = dy * x^T; a transposed convolution
// is the same machinery with the roles of x and y exchanged.
#pragma once

#include <array>

#include "kernels/blas_util.h"

namespace devx::cpu_sim::kern {

// Spatial dimensions are padded in front to 3 (size 1, kernel 1, stride 1, no padding), so one
// code path serves 1-d, 2-d and 3-d convolutions.
struct ConvGeom {
  int64_t n = 0, c_in = 0, c_out = 0, groups = 1;
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, k{1, 1, 1}, stride{1, 1, 1}, pad{0, 0, 0}, dil{1, 1, 1};

  int64_t in_plane() const { return in[0] * in[1] * in[2]; }
  int64_t out_plane() const { return out[0] * out[1] * out[2]; }
  int64_t kernel_elems() const { return k[0] * k[1] * k[2]; }
  // Rows of the column matrix per group: (input channel, kernel offset) pairs.
  int64_t kg() const { return c_in / groups * kernel_elems(); }
};

// What one pass over the batch computes; a Tensor with data == nullptr is not used. x and dx are
// [N, c_in, 3 spatial] views, y and dy [N, c_out, 3 spatial], weight and dw
// [c_out, c_in / groups, 3 kernel] (see to_5d).
struct ConvJob {
  ConvGeom g;
  Tensor x;       // read through im2col (forward and weight gradient)
  Tensor dy;      // read (input and weight gradients)
  Tensor y;       // written: W * x (+ bias per output channel)
  Tensor dx;      // written: W^T * dy (+ bias per input channel: a transposed convolution's output)
  Tensor weight;  // read for y and dx
  Tensor bias;    // 1-d, or data == nullptr
  Tensor dw;      // written: dy * x^T
};

// The view of `t` (a [N, C, D spatial] tensor or a [C_out, C_in/g, D kernel] weight) with its
// spatial dimensions padded in front to 3.
Tensor to_5d(const Tensor& t);

// The op's arguments as the geometry of the convolution seen as a forward one: input, weight and
// output are the op's, as 5-d views of tensors with `spatial` spatial dimensions (for the backward
// op, output is grad_output). A transposed convolution input -> output is the input gradient of
// the convolution output -> input. Returns an error (invalid()) where shapes and lists disagree.
DevxStatus conv_geometry(const char* op, int spatial, ConvGeom& g, const Tensor& input, const Tensor& weight,
                         const Tensor& output, DevxIntList stride, DevxIntList padding, DevxIntList dilation,
                         int transposed, DevxIntList output_padding, int64_t groups);

// Convolutions compute in float, double, or (for the integer types) int64_t.
inline bool conv_dtype(DevxDType d) { return d != DEVX_BOOL && !is_complex(d); }

// Plans workspaces and issues the job on ctx's stream.
DevxStatus run_conv(DevxKernelContext* ctx, const ConvJob& job);

}  // namespace devx::cpu_sim::kern
