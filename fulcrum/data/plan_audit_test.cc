#include "fulcrum/data/plan_audit.h"

#include <gtest/gtest.h>

#include <vector>

#include "fulcrum/data/test_data.h"

namespace fulcrum {
namespace {

TEST(PlanAudit, CountsMissingDuplicatedAndEmpty) {
  const Dataset data = testing::random_dataset(5, 1);
  BatchPlan plan("x", 2, 1, false);
  const std::vector<uint32_t> a{0, 1, 1}, b{2}, empty{}, c{9};
  plan.add_micro_batch(a);
  plan.add_micro_batch(b);
  plan.add_micro_batch(empty);
  plan.add_micro_batch(c);
  const PlanAudit audit = audit_plan(plan, data);
  EXPECT_EQ(audit.samples_out, 5);
  EXPECT_EQ(audit.extra, 1);
  EXPECT_EQ(audit.duplicated, 1);  // nothing was declared repeated
  EXPECT_EQ(audit.missing, 2);     // 3 and 4
  EXPECT_EQ(audit.empty_micro_batches, 1);
  EXPECT_EQ(audit.out_of_range, 1);
  EXPECT_FALSE(audit.ok(plan));
}

TEST(PlanAudit, DeclaredRepeatsAreNotDuplicates) {
  const Dataset data = testing::random_dataset(3, 1);
  BatchPlan plan("x", 2, 1, false);
  const std::vector<uint32_t> a{0, 1}, b{2, 0};
  plan.add_micro_batch(a);
  plan.add_micro_batch(b);
  plan.repeated = 1;
  const PlanAudit audit = audit_plan(plan, data);
  EXPECT_EQ(audit.duplicated, 0);
  EXPECT_TRUE(audit.ok(plan));
}

}  // namespace
}  // namespace fulcrum
