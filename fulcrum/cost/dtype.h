#ifndef FULCRUM_COST_DTYPE_H_
#define FULCRUM_COST_DTYPE_H_

#include <string>
#include <string_view>

#include "fulcrum/model/cluster_spec.h"

namespace fulcrum {

// The number format training computes in. It sets the matmul rate and the bytes of activations:
//   bf16, fp16  16-bit throughout (the default; the two run at the same tensor-core rate)
//   fp8         the linear layers' GEMMs in fp8 as Transformer Engine runs them: twice the bf16 rate, their
//               inputs (weights and the activations saved for backward) 1 byte; attention, norms, the
//               residual stream and communication stay 16-bit. Only devices with fp8 tensor cores
//               (H100, H200) have it.
//   fp32        TF32 tensor cores for matmuls and attention: half the bf16 rate (NVIDIA's dense TF32 figures,
//               A100 156 and H100 494.5 TFLOP/s; a CPU runs fp32 at half its bf16-labelled rate too), and
//               4-byte activations and communication
enum class Dtype { kBf16, kFp16, kFp8, kFp32 };

std::string_view dtype_name(Dtype dtype);
// "bf16", "fp16", "fp8", "fp32"; anything else throws InputError listing them.
Dtype parse_dtype(std::string_view name);

// Bytes of one activation element outside the matmul inputs (and of communicated activations).
double activation_element_bytes(Dtype dtype);
// Bytes of one element of a matmul input: its weights and the activation it reads (and saves for backward).
double matmul_input_bytes(Dtype dtype);

// The dense peak of the device's tensor cores in `dtype` for the linear layers' matmuls; attention runs at
// attention_peak_flops_per_second (16-bit unless fp32). Throws InputError for fp8 on a device without it.
double matmul_peak_flops_per_second(const DeviceSpec& device, Dtype dtype);
double attention_peak_flops_per_second(const DeviceSpec& device, Dtype dtype);

}  // namespace fulcrum

#endif  // FULCRUM_COST_DTYPE_H_
