// Write guards on tensors alone: what was kept comes back as it was, whatever is written later,
// and nothing is copied where nothing is written.
#include "hooks/internal/write_guard.h"

#include <functional>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/_lazy_clone.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/variable.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hooks/internal/lazy_clone.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace hooks_internal {
namespace {

using ::kd::test::TensorEq;

// `t` kept, `write` run on it, then resolved.
at::Tensor KeepWriteResolve(const at::Tensor& t, const std::function<void(at::Tensor&)>& write) {
  WriteGuards guards;
  WriteGuard guard;
  c10::IValue kept = t;
  guards.Keep(kept, guard);
  EXPECT_TRUE(guard.armed()) << "a plain tensor is guarded, not copied";
  EXPECT_TRUE(kept.toTensor().is_same(t));
  at::Tensor model_tensor = t;
  write(model_tensor);
  return guards.Resolve(std::move(kept), guard).toTensor();
}

TEST(WriteGuardTest, UnwrittenTensorComesBackItselfWithItsMemory) {
  const at::Tensor t = at::arange(6.0).view({2, 3});
  const void* memory = t.const_data_ptr();
  const int64_t copies = WriteGuards::CopiesMade();
  const at::Tensor back = KeepWriteResolve(t, [](at::Tensor& x) { (void)x.sum(); });  // reads
  EXPECT_TRUE(back.is_same(t));
  EXPECT_EQ(back.const_data_ptr(), memory);
  EXPECT_EQ(WriteGuards::CopiesMade(), copies);  // nothing copied
  EXPECT_THAT(back, TensorEq(at::arange(6.0).view({2, 3})));
  // Disarmed once the guard is gone: a write now copies nothing.
  at::Tensor(t).add_(1);
  EXPECT_EQ(WriteGuards::CopiesMade(), copies);
}

TEST(WriteGuardTest, InPlaceWritesDoNotReachTheKeptValue) {
  const at::Tensor t = at::arange(6.0).view({2, 3});
  const at::Tensor before = t.clone();
  for (const auto& write : std::vector<std::function<void(at::Tensor&)>>{
           [](at::Tensor& x) { x.relu_().sub_(10); },
           [](at::Tensor& x) { x.narrow(1, 0, 2).zero_(); },  // through a view
           [](at::Tensor& x) { x.add_(1); },
       }) {
    const at::Tensor u = before.clone();
    const at::Tensor back = KeepWriteResolve(u, write);
    EXPECT_THAT(back, TensorEq(before));
    EXPECT_FALSE(u.equal(before)) << "the model's tensor was written";
  }
}

TEST(WriteGuardTest, AWriteThroughTheBaseDoesNotReachAKeptView) {
  const at::Tensor base = at::arange(6.0);
  const at::Tensor view = base.narrow(0, 2, 3);  // 2, 3, 4
  const at::Tensor back = KeepWriteResolve(view, [&](at::Tensor&) { base.fill_(-1); });
  EXPECT_THAT(back, TensorEq(at::arange(2.0, 5.0)));
  EXPECT_THAT(view, TensorEq(at::full({3}, -1.0)));
}

TEST(WriteGuardTest, MetadataChangesDoNotReachTheKeptValue) {
  const at::Tensor expected = at::arange(6.0).view({2, 3});
  for (const auto& change : std::vector<std::function<void(at::Tensor&)>>{
           [](at::Tensor& x) { x.t_(); }, [](at::Tensor& x) { x.unsqueeze_(0); },
           [](at::Tensor& x) { x.as_strided_({3}, {2}, 1); },
           [](at::Tensor& x) { x.set_(at::zeros({4})); },
           [](at::Tensor& x) { x.resize_({2}).fill_(7); },
           [](at::Tensor& x) { x.resize_({5000}).fill_(7); },  // a new buffer, then a write
       }) {
    const at::Tensor t = expected.clone();
    EXPECT_THAT(KeepWriteResolve(t, change), TensorEq(expected));
  }
}

// Resolve compares a tensor's version first, its sizes and strides only when the version
// moved: an in-place op that leaves the layout as it was (twice t_, or t_ through a detached
// alias, which shares the version counter) still gives the model's own tensor back.
TEST(WriteGuardTest, AMovedVersionWithTheLayoutAsItWasGivesTheTensorItself) {
  for (const auto& change : std::vector<std::function<void(at::Tensor&)>>{
           [](at::Tensor& x) { x.t_().t_(); },
           [](at::Tensor& x) { x.detach().t_(); },
       }) {
    const at::Tensor t = at::arange(6.0).view({2, 3});
    const int64_t version = t._version();
    const at::Tensor back = KeepWriteResolve(t, change);
    EXPECT_GT(t._version(), version);
    EXPECT_TRUE(back.is_same(t));
    EXPECT_THAT(back, TensorEq(at::arange(6.0).view({2, 3})));
  }
}

// Past five dimensions the guard keeps the layout on the heap.
TEST(WriteGuardTest, ASixDimensionalTensorComesBackWithItsLayout) {
  const at::Tensor expected = at::arange(64.0).view({2, 2, 2, 2, 2, 2}).transpose(1, 4);
  const at::Tensor t = expected.clone().transpose(0, 3);
  const at::Tensor kept_as = t.clone();
  const at::Tensor back = KeepWriteResolve(t, [](at::Tensor& x) { x.transpose_(0, 5).mul_(-1); });
  EXPECT_EQ(back.strides(), kept_as.strides());
  EXPECT_THAT(back, TensorEq(kept_as));
}

TEST(WriteGuardTest, AnUndefinedTensorStaysUndefined) {
  WriteGuards guards;
  WriteGuard guard;
  c10::IValue kept = at::Tensor();
  guards.Keep(kept, guard);
  EXPECT_FALSE(guard.armed());
  EXPECT_FALSE(guards.Resolve(kept, guard).toTensor().defined());
}

TEST(WriteGuardTest, ValuesOfOneTensorShareOneCopyAndComeBackAsOneTensor) {
  at::Tensor t = at::arange(4.0);
  WriteGuards guards;
  WriteGuard first, second;
  c10::IValue a = t, b = t;
  guards.Keep(a, first);
  guards.Keep(b, second);
  EXPECT_EQ(first.slot, second.slot);
  const int64_t copies = WriteGuards::CopiesMade();
  t.mul_(-1);
  t.mul_(-1);
  t.mul_(-1);
  EXPECT_EQ(WriteGuards::CopiesMade(), copies + 1);  // before the first write only
  const at::Tensor back_a = guards.Resolve(std::move(a), first).toTensor();
  const at::Tensor back_b = guards.Resolve(std::move(b), second).toTensor();
  EXPECT_THAT(back_a, TensorEq(at::arange(4.0)));
  EXPECT_THAT(t, TensorEq(-at::arange(4.0)));
  EXPECT_TRUE(back_a.is_same(back_b));
}

// A second recorder on a storage the first guards copies it at once (lazily where libtorch
// can: a copy-on-write share); so does a lazy copy of an armed storage.
TEST(WriteGuardTest, GuardsOfTwoRecordersAndCopyOnWriteStoragesAgree) {
  at::Tensor t = at::arange(3.0);
  WriteGuards one, two;
  WriteGuard g1, g2;
  c10::IValue a = t, b = t;
  one.Keep(a, g1);
  two.Keep(b, g2);
  EXPECT_TRUE(g1.armed());
  EXPECT_FALSE(g2.armed());
  EXPECT_FALSE(b.toTensor().is_same(t));
  const c10::IValue lazy = LazyCloneValue(t);  // eager: at::_lazy_clone would assert
  t.zero_();
  EXPECT_THAT(one.Resolve(std::move(a), g1).toTensor(), TensorEq(at::arange(3.0)));
  EXPECT_THAT(two.Resolve(std::move(b), g2).toTensor(), TensorEq(at::arange(3.0)));
  EXPECT_THAT(lazy.toTensor(), TensorEq(at::arange(3.0)));

  at::Tensor u = at::arange(3.0);
  const at::Tensor cow = at::_lazy_clone(u);
  WriteGuard g3;
  c10::IValue c = u;
  one.Keep(c, g3);
  EXPECT_FALSE(g3.armed());
  EXPECT_FALSE(c.toTensor().is_same(u));
  u.fill_(5);
  EXPECT_THAT(c.toTensor(), TensorEq(at::arange(3.0)));
  EXPECT_THAT(cow, TensorEq(at::arange(3.0)));
}

TEST(WriteGuardTest, AWriteAfterTheFirstKeepSplitsTheShare) {
  at::Tensor t = at::arange(3.0);
  WriteGuards guards;
  WriteGuard first, second;
  c10::IValue a = t;
  guards.Keep(a, first);
  t.add_(10);  // 10, 11, 12
  c10::IValue b = t;
  guards.Keep(b, second);
  t.add_(10);  // 20, 21, 22
  EXPECT_THAT(guards.Resolve(std::move(a), first).toTensor(), TensorEq(at::arange(3.0)));
  EXPECT_THAT(guards.Resolve(std::move(b), second).toTensor(), TensorEq(at::arange(10.0, 13.0)));
}

TEST(WriteGuardTest, GradientsFlowThroughARebuiltValueAlongTheRecordedHistory) {
  const at::Tensor w = at::ones({3}).requires_grad_();
  at::Tensor t = w * at::tensor({1.0f, 2.0f, 3.0f});  // d t / d w = (1, 2, 3)
  WriteGuards guards;
  WriteGuard guard;
  c10::IValue kept = t;
  guards.Keep(kept, guard);
  ASSERT_TRUE(guard.armed());
  t.mul_(5);  // the model's own history now has a MulBackward on top
  const at::Tensor back = guards.Resolve(std::move(kept), guard).toTensor();
  EXPECT_THAT(back.detach(), TensorEq(at::tensor({1.0f, 2.0f, 3.0f})));
  ASSERT_TRUE(back.requires_grad());
  back.sum().backward();
  EXPECT_THAT(w.grad(), TensorEq(at::tensor({1.0f, 2.0f, 3.0f})));  // not 5, 10, 15
}

// A leaf that requires grad is guarded like any tensor: it comes back itself where nothing
// wrote it, and as it was where something did (an update without autograd), its gradient going
// to the leaf's accumulator as the leaf's own would.
TEST(WriteGuardTest, ALeafThatRequiresGradComesBackItselfOrWithItsAccumulator) {
  const at::Tensor leaf = at::arange(3.0).requires_grad_();
  {
    WriteGuards guards;
    WriteGuard guard;
    c10::IValue kept = leaf;
    guards.Keep(kept, guard);
    EXPECT_TRUE(guard.armed());
    EXPECT_TRUE(guards.Resolve(std::move(kept), guard).toTensor().is_same(leaf));
  }
  WriteGuards guards;
  WriteGuard first, second;
  c10::IValue a = leaf, b = leaf;
  guards.Keep(a, first);
  guards.Keep(b, second);
  {
    at::NoGradGuard no_grad;
    leaf.mul_(10);
  }
  const at::Tensor back = guards.Resolve(std::move(a), first).toTensor();
  EXPECT_TRUE(guards.Resolve(std::move(b), second).toTensor().is_same(back));
  EXPECT_THAT(back.detach(), TensorEq(at::arange(3.0)));
  ASSERT_TRUE(back.requires_grad());
  (back * 2).sum().backward();
  EXPECT_THAT(leaf.grad(), TensorEq(at::full({3}, 2.0)));
}

TEST(WriteGuardTest, ValuesAGuardCannotServeAreCopiedAtOnce) {
  WriteGuards guards;
  WriteGuard guard;
  // A tensor that requires grad, kept without autograd: a copy made without autograd (which
  // does not require grad).
  {
    const at::Tensor leaf = at::ones({2}).requires_grad_();
    at::NoGradGuard no_grad;
    c10::IValue kept = leaf;
    guards.Keep(kept, guard);
    EXPECT_FALSE(guard.armed());
    EXPECT_FALSE(kept.toTensor().is_same(leaf));
    EXPECT_FALSE(kept.toTensor().requires_grad());
  }
  // A tuple of arguments: each element copied lazily.
  at::Tensor x = at::arange(2.0);
  c10::IValue tuple = c10::ivalue::Tuple::create({x, x});
  guards.Keep(tuple, guard);
  EXPECT_FALSE(guard.armed());
  x.add_(5);
  EXPECT_THAT(tuple.toTupleRef().elements()[0].toTensor(), TensorEq(at::arange(2.0)));
  // Not a tensor at all.
  c10::IValue number = 3;
  guards.Keep(number, guard);
  EXPECT_EQ(guards.Resolve(number, guard).toInt(), 3);
}

// Past the process's 4096 hook slots, values are copied at once: all still come back right,
// and the slots are free again once their guards are gone.
TEST(WriteGuardTest, PastTheSlotsValuesAreCopiedAtOnce) {
  constexpr int kValues = 5000;
  for (int round = 0; round < 2; ++round) {
    WriteGuards guards;
    std::vector<at::Tensor> tensors;
    std::vector<c10::IValue> kept(kValues);
    std::vector<WriteGuard> kept_guards(kValues);
    int armed = 0;
    for (int i = 0; i < kValues; ++i) {
      tensors.push_back(at::full({2}, static_cast<double>(i)));
      kept[i] = tensors.back();
      guards.Keep(kept[i], kept_guards[i]);
      armed += kept_guards[i].armed();
    }
    EXPECT_EQ(armed, 4096);
    for (at::Tensor& t : tensors) t.neg_();
    for (int i = 0; i < kValues; ++i) {
      ASSERT_THAT(guards.Resolve(std::move(kept[i]), kept_guards[i]).toTensor(),
                  TensorEq(at::full({2}, static_cast<double>(i))))
          << i;
    }
  }
}

TEST(WriteGuardTest, InferenceTensorsComeBackAsInferenceTensors) {
  c10::InferenceMode inference;
  at::Tensor t = at::arange(3.0);
  const at::Tensor back = KeepWriteResolve(t, [](at::Tensor& x) { x.zero_(); });
  EXPECT_TRUE(back.is_inference());
  EXPECT_THAT(back, TensorEq(at::arange(3.0)));
}

}  // namespace
}  // namespace hooks_internal
}  // namespace kd
