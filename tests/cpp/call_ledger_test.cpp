// The call ledger's prediction (distributed/call_ledger.h): which all_reduces can run blind, and
// when every rank, keeping the same history, predicts the next call.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "distributed/call_ledger.h"

namespace devx::dist {
namespace {

using RedOp = c10d::ReduceOp::RedOpType;

std::optional<BlindAllreduce> form_of(const std::vector<at::Tensor>& tensors, RedOp op) {
  return blind_form(tensors, c10d::ReduceOp(op));
}

TEST(BlindForm, OneFloatTensorWithAnOpThatHasAnAbsorbingValue) {
  const at::Tensor t = at::zeros({3, 4});
  for (RedOp op : {RedOp::SUM, RedOp::AVG, RedOp::PRODUCT, RedOp::MAX, RedOp::MIN}) {
    std::optional<BlindAllreduce> form = form_of({t}, op);
    ASSERT_TRUE(form.has_value());
    EXPECT_EQ(form->dtype, at::kFloat);
    EXPECT_EQ(form->numel, 12);
    EXPECT_EQ(form->op, op);
  }
}

TEST(BlindForm, IntegersOnlyForMaxAndMin) {
  const at::Tensor t = at::zeros({5}, at::kLong);
  EXPECT_TRUE(form_of({t}, RedOp::MAX).has_value());
  EXPECT_TRUE(form_of({t}, RedOp::MIN).has_value());
  // A sum of integers has no value every result keeps.
  EXPECT_FALSE(form_of({t}, RedOp::SUM).has_value());
}

TEST(BlindForm, NotForSeveralTensorsOrAnEmptyOne) {
  EXPECT_FALSE(form_of({at::zeros({2}), at::zeros({2})}, RedOp::SUM).has_value());
  EXPECT_FALSE(form_of({at::zeros({0})}, RedOp::SUM).has_value());
  EXPECT_FALSE(form_of({at::zeros({2})}, RedOp::BAND).has_value());
}

constexpr BlindAllreduce kForm{at::kFloat, 8, RedOp::SUM};

TEST(CallHistory, PredictsTheCallThatFollowedTheLastOneTwice) {
  CallHistory history;
  EXPECT_FALSE(history.predict().has_value());
  // A step of two calls: 10 (an all_reduce that can run blind) and 20 (one that cannot).
  history.agree(10, kForm);
  history.agree(20, std::nullopt);
  history.agree(10, kForm);
  EXPECT_FALSE(history.predict().has_value());  // after 10: 20, seen once
  history.agree(20, std::nullopt);
  EXPECT_FALSE(history.predict().has_value());  // after 20: 10, seen once
  history.agree(10, kForm);
  EXPECT_FALSE(history.predict().has_value());  // after 10: 20 twice, but 20 cannot run blind
  history.agree(20, std::nullopt);
  std::optional<CallHistory::Prediction> p = history.predict();
  ASSERT_TRUE(p.has_value());  // after 20: 10 twice
  EXPECT_EQ(p->hash, 10u);
  EXPECT_EQ(p->form.numel, 8);
}

TEST(CallHistory, ADifferentSuccessorStartsItsStreakAgain) {
  CallHistory history;
  for (int i = 0; i < 3; ++i) {
    history.agree(1, std::nullopt);
    history.agree(2, kForm);
  }
  history.agree(1, std::nullopt);
  ASSERT_TRUE(history.predict().has_value());
  history.agree(3, kForm);  // not the prediction
  history.agree(1, std::nullopt);
  EXPECT_FALSE(history.predict().has_value());  // after 1: 3, seen once
}

TEST(CallHistory, ForgetStartsOver) {
  CallHistory history;
  for (int i = 0; i < 3; ++i) {
    history.agree(1, std::nullopt);
    history.agree(2, kForm);
  }
  history.agree(1, std::nullopt);
  ASSERT_TRUE(history.predict().has_value());
  history.forget();
  EXPECT_FALSE(history.predict().has_value());
  history.agree(1, std::nullopt);
  EXPECT_FALSE(history.predict().has_value());
}

}  // namespace
}  // namespace devx::dist
