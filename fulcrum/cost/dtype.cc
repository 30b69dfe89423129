#include "fulcrum/cost/dtype.h"

#include <fmt/format.h>

#include "fulcrum/core/error.h"

namespace fulcrum {

std::string_view dtype_name(Dtype dtype) {
  switch (dtype) {
    case Dtype::kBf16: return "bf16";
    case Dtype::kFp16: return "fp16";
    case Dtype::kFp8: return "fp8";
    case Dtype::kFp32: return "fp32";
  }
  return "?";
}

Dtype parse_dtype(std::string_view name) {
  for (Dtype d : {Dtype::kBf16, Dtype::kFp16, Dtype::kFp8, Dtype::kFp32}) {
    if (dtype_name(d) == name) return d;
  }
  throw InputError(fmt::format("unknown dtype '{}'; known: bf16, fp16, fp8, fp32", name));
}

double activation_element_bytes(Dtype dtype) { return dtype == Dtype::kFp32 ? 4 : 2; }

double matmul_input_bytes(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFp8: return 1;
    case Dtype::kFp32: return 4;
    default: return 2;
  }
}

double matmul_peak_flops_per_second(const DeviceSpec& device, Dtype dtype) {
  switch (dtype) {
    case Dtype::kBf16:
    case Dtype::kFp16:
      return device.bf16_flops_per_second;
    case Dtype::kFp32:
      return device.bf16_flops_per_second / 2;
    case Dtype::kFp8:
      if (!(device.fp8_flops_per_second > 0)) {
        throw InputError(fmt::format("dtype fp8 needs fp8 tensor cores (h100, h200); {} has none",
                                     device.kind.empty() ? std::string("this device") : device.kind));
      }
      return device.fp8_flops_per_second;
  }
  return device.bf16_flops_per_second;
}

double attention_peak_flops_per_second(const DeviceSpec& device, Dtype dtype) {
  return dtype == Dtype::kFp32 ? device.bf16_flops_per_second / 2 : device.bf16_flops_per_second;
}

}  // namespace fulcrum
