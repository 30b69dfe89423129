#include "fulcrum/cost/dtype.h"

#include <gtest/gtest.h>

#include "fulcrum/core/error.h"

namespace fulcrum {
namespace {

TEST(Dtype, NamesAndElementSizes) {
  for (Dtype d : {Dtype::kBf16, Dtype::kFp16, Dtype::kFp8, Dtype::kFp32}) EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  EXPECT_THROW(parse_dtype("int8"), InputError);
  EXPECT_EQ(activation_element_bytes(Dtype::kFp8), 2);  // outside the matmuls fp8 training stays 16-bit
  EXPECT_EQ(matmul_input_bytes(Dtype::kFp8), 1);
  EXPECT_EQ(activation_element_bytes(Dtype::kFp32), 4);
  EXPECT_EQ(matmul_input_bytes(Dtype::kBf16), 2);
}

TEST(Dtype, PeakRatesPerDevice) {
  const DeviceSpec h100 = cluster_preset("h100").device, a100 = cluster_preset("a100").device;
  EXPECT_DOUBLE_EQ(matmul_peak_flops_per_second(h100, Dtype::kFp8), 2 * 989e12);
  EXPECT_DOUBLE_EQ(matmul_peak_flops_per_second(h100, Dtype::kFp16), 989e12);
  EXPECT_DOUBLE_EQ(matmul_peak_flops_per_second(h100, Dtype::kFp32), 494.5e12);  // TF32 dense
  EXPECT_DOUBLE_EQ(matmul_peak_flops_per_second(a100, Dtype::kFp32), 156e12);
  EXPECT_DOUBLE_EQ(attention_peak_flops_per_second(h100, Dtype::kFp8), 989e12);
  EXPECT_DOUBLE_EQ(matmul_peak_flops_per_second(cluster_preset("cpu").device, Dtype::kFp32), 40e9);
  try {
    matmul_peak_flops_per_second(a100, Dtype::kFp8);
    FAIL() << "fp8 on an A100";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "dtype fp8 needs fp8 tensor cores (h100, h200); a100 has none");
  }
}

}  // namespace
}  // namespace fulcrum
