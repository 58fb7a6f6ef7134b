// RemoteStore's overlap (parameter_store.h): each layer's exchange starts in
// the backward pass and is waited for in the next forward pass, with the
// same parameters as the store that exchanges everything after the step; a
// failed exchange is reported by the next Update, and no gradient of the
// step after it leaves the worker.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "tests/unit/worker-agent/sidecar/fake_kv_worker.h"
#include "worker-agent/parameter_store.h"
#include "worker-agent/trainer/model.h"
#include "worker-agent/trainer/models.h"

namespace kubeps {
namespace {

using sidecar::FakeKVWorker;

constexpr int kBatch = 16;

// Every layer's gradients in a request of their own.
ExchangeOptions PerLayer(bool overlap = true) {
  ExchangeOptions options;
  options.overlap = overlap;
  options.bucket_bytes = 0;
  return options;
}

struct Batch {
  std::vector<float> images = std::vector<float>(kBatch * 784);
  std::vector<uint8_t> labels = std::vector<uint8_t>(kBatch);
  explicit Batch(uint64_t step) {
    std::mt19937 rng(static_cast<uint32_t>(step));
    std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
    for (float& x : images) x = pixel(rng);
    for (uint8_t& y : labels) y = static_cast<uint8_t>(rng() % 10);
  }
};

// `steps` steps of the model on its own fake servers; the model's final
// parameters.
std::vector<std::vector<float>> Train(const char* name, const ExchangeOptions& options, int steps,
                                      FakeKVWorker* kv) {
  auto model = trainer::MakeModel(name);
  model->Initialize(7);
  RemoteStore store(kv, /*sync=*/true, options);
  EXPECT_TRUE(store.Init(*model).ok());
  for (int step = 0; step < steps; ++step) {
    Batch batch(step);
    store.BeginStep(step);
    model->ForwardBackward(batch.images.data(), batch.labels.data(), kBatch);
    EXPECT_TRUE(store.Update(step, *model).ok());
  }
  EXPECT_TRUE(store.Flush().ok());
  std::vector<std::vector<float>> values;
  for (const auto& p : model->parameters()) values.push_back(p.value);
  return values;
}

std::vector<std::set<size_t>> PushedKeys(const FakeKVWorker& kv) {
  std::vector<std::set<size_t>> keys;
  for (const auto& push : kv.pushes()) {
    std::set<size_t> k;
    for (const auto& [key, grad] : push.grads) k.insert(key);
    keys.push_back(k);
  }
  return keys;
}

TEST(RemoteStoreTest, OverlapEndsWithTheSameParametersLayerByLayer) {
  for (const char* name : {"mlp", "cnn"}) {
    FakeKVWorker with, without;
    const auto overlapped = Train(name, PerLayer(), 4, &with);
    const auto after_the_step = Train(name, PerLayer(false), 4, &without);
    EXPECT_EQ(overlapped, after_the_step) << name;
    // Without overlap one exchange per step holds every tensor; with it,
    // one per layer (two tensors each).
    const size_t tensors = overlapped.size();
    ASSERT_EQ(without.pushes().size(), 4u) << name;
    for (const auto& keys : PushedKeys(without)) EXPECT_EQ(keys.size(), tensors) << name;
    ASSERT_EQ(with.pushes().size(), 4 * tensors / 2) << name;
    for (const auto& keys : PushedKeys(with)) EXPECT_EQ(keys.size(), 2u) << name;
  }
}

TEST(RemoteStoreTest, TheExchangeStartsInTheBackwardPassAndIsWaitedForInTheNextForward) {
  FakeKVWorker kv;
  auto model = trainer::MakeModel("mlp");
  model->Initialize(7);
  RemoteStore store(&kv, true, PerLayer());
  ASSERT_TRUE(store.Init(*model).ok());
  Batch batch(0);
  store.BeginStep(0);
  model->ForwardBackward(batch.images.data(), batch.labels.data(), kBatch);
  EXPECT_EQ(kv.open_tickets(), 2u);  // dense2's, then dense1's, before Update
  ASSERT_TRUE(store.Update(0, *model).ok());
  EXPECT_EQ(kv.open_tickets(), 2u);  // Update does not wait
  store.BeginStep(1);
  model->ForwardBackward(batch.images.data(), batch.labels.data(), kBatch);
  // The forward pass of step 1 waited for both; its backward pass sent two more.
  EXPECT_EQ(kv.pushes().size(), 2u);
  EXPECT_EQ(kv.open_tickets(), 2u);
  ASSERT_TRUE(store.Update(1, *model).ok());
  ASSERT_TRUE(store.Flush().ok());
  EXPECT_EQ(kv.open_tickets(), 0u);
  EXPECT_EQ(kv.pushes().size(), 4u);
}

TEST(RemoteStoreTest, ARollbackIsReportedByTheNextUpdateAndTheStepAfterSendsNothing) {
  FakeKVWorker kv;
  auto model = trainer::MakeModel("mlp");
  model->Initialize(7);
  RemoteStore store(&kv, true, PerLayer());
  ASSERT_TRUE(store.Init(*model).ok());
  const auto initial = kv.store();
  Batch batch(0);
  store.BeginStep(0);
  model->ForwardBackward(batch.images.data(), batch.labels.data(), kBatch);
  ASSERT_TRUE(store.Update(0, *model).ok());
  kv.RollBack(0, initial);  // a shard restarted: step 0's exchange ends Aborted
  store.BeginStep(1);
  model->ForwardBackward(batch.images.data(), batch.labels.data(), kBatch);
  // The forward pass waited for step 0's exchanges (Aborted); the backward
  // pass started none: no gradient of step 1 left after step 0 failed.
  EXPECT_EQ(kv.open_tickets(), 0u);
  EXPECT_TRUE(kv.pushes().empty());
  Status updated = store.Update(1, *model);
  EXPECT_TRUE(updated.IsAborted()) << updated.message();
  EXPECT_TRUE(kv.pushes().empty());
  uint64_t step = 99;
  ASSERT_TRUE(store.Resume(*model, &step).ok());
  EXPECT_EQ(step, 0u);
  for (size_t k = 0; k < initial.size(); ++k) EXPECT_EQ(model->parameters()[k].value, initial[k]);
}

// By default small layers wait for the next ones until their request holds
// 1 MiB, or the backward pass is over: the MLP (0.8 MB) goes as one request
// at its end, the CNN as dense2 with dense1 (12.8 MB), then conv2 with conv1.
// Both still before Update, with the same parameters.
TEST(RemoteStoreTest, SmallLayersTravelWithTheNextOnesUntilARequestHoldsABucket) {
  struct Expected {
    const char* model;
    std::vector<std::set<size_t>> keys_per_step;
  };
  for (const Expected& expected :
       {Expected{"mlp", {{0, 1, 2, 3}}}, Expected{"cnn", {{4, 5, 6, 7}, {0, 1, 2, 3}}}}) {
    FakeKVWorker bucketed, per_layer;
    const auto values = Train(expected.model, ExchangeOptions{}, 2, &bucketed);
    EXPECT_EQ(values, Train(expected.model, PerLayer(), 2, &per_layer)) << expected.model;
    // In the order the fake served them: not necessarily the order sent.
    std::multiset<std::set<size_t>> keys(expected.keys_per_step.begin(),
                                         expected.keys_per_step.end());
    keys.insert(expected.keys_per_step.begin(), expected.keys_per_step.end());
    const auto pushed = PushedKeys(bucketed);
    EXPECT_EQ(std::multiset<std::set<size_t>>(pushed.begin(), pushed.end()), keys)
        << expected.model;
  }
  FakeKVWorker kv;
  auto model = trainer::MakeModel("cnn");
  model->Initialize(7);
  RemoteStore store(&kv, true);
  ASSERT_TRUE(store.Init(*model).ok());
  Batch batch(0);
  store.BeginStep(0);
  model->ForwardBackward(batch.images.data(), batch.labels.data(), kBatch);
  EXPECT_EQ(kv.open_tickets(), 2u) << "both buckets leave during the backward pass";
}

TEST(RemoteStoreTest, TheTimeBlockedOnTheExchangeIsCountedAsWaitedOnce) {
  FakeKVWorker kv;
  auto model = trainer::MakeModel("mlp");
  model->Initialize(7);
  RemoteStore store(&kv, true, PerLayer(/*overlap=*/false));
  ASSERT_TRUE(store.Init(*model).ok());
  store.TakeWaitedSeconds();
  Batch batch(0);
  store.BeginStep(0);
  model->ForwardBackward(batch.images.data(), batch.labels.data(), kBatch);
  kv.Hold();
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kv.Release();
  });
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(store.Update(0, *model).ok());  // blocks until the release
  const double blocked =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  release.join();
  const double waited = store.TakeWaitedSeconds();
  EXPECT_GE(waited, 0.3);
  EXPECT_LE(waited, blocked);
  EXPECT_EQ(store.TakeWaitedSeconds(), 0.0) << "taken twice";
}

// A model that does not report its layers (as the CUDA models): the store
// must move and wait for everything in Update.
class SilentMlp : public trainer::MlpModel {
 public:
  bool reports_layers() const override { return false; }
};

TEST(RemoteStoreTest, AModelThatDoesNotReportItsLayersIsExchangedAndWaitedForInUpdate) {
  FakeKVWorker kv;
  SilentMlp model;
  model.Initialize(7);
  RemoteStore store(&kv, true, PerLayer());
  ASSERT_TRUE(store.Init(model).ok());
  for (int step = 0; step < 2; ++step) {
    Batch batch(step);
    store.BeginStep(step);
    model.ForwardBackward(batch.images.data(), batch.labels.data(), kBatch);
    EXPECT_EQ(kv.open_tickets(), 0u) << "nothing may go before Update";
    ASSERT_TRUE(store.Update(step, model).ok());
    EXPECT_EQ(kv.open_tickets(), 0u) << "Update returned with its exchange in flight";
    EXPECT_EQ(kv.pushes().size(), static_cast<size_t>(step + 1));
  }
}

TEST(RemoteStoreTest, ANonFiniteLossSendsNothingWhenTheJobFailsOnIt) {
  for (bool hold : {true, false}) {
    FakeKVWorker kv;
    auto model = trainer::MakeModel("mlp");
    model->Initialize(7);
    ExchangeOptions options = PerLayer();
    options.hold_non_finite = hold;
    RemoteStore store(&kv, true, options);
    ASSERT_TRUE(store.Init(*model).ok());
    Batch batch(0);
    model->parameters()[3].value[0] = std::nanf("");  // dense2.bias: a model gone bad
    store.BeginStep(0);
    const float loss = model->ForwardBackward(batch.images.data(), batch.labels.data(), kBatch);
    ASSERT_FALSE(std::isfinite(loss));
    // spec.nonFinite Fail: the loop fails the job, nothing reaches a server;
    // SkipStep: the gradients go, and the servers skip the step.
    EXPECT_EQ(kv.open_tickets(), hold ? 0u : 2u) << "hold " << hold;
  }
}

// A worker restarted mid-job starts at the servers' step. Before, it started
// at the step of the job's last recovery (0 where there was none) and
// computed every step since, each gradient dropped as one of a step already
// applied, while the other workers waited: 6 s for the CNN killed at step
// 185, hours for a long job.
TEST(RemoteStoreTest, ARestartedWorkerStartsAtTheServersStepNotTheLastRecoverys) {
  FakeKVWorker kv;
  kv.SetVersion(40);  // the other workers trained on; no recovery since the start
  auto model = trainer::MakeModel("mlp");
  model->Initialize(7);
  RemoteStore store(&kv, /*sync=*/true, PerLayer(false));
  ASSERT_TRUE(store.Init(*model).ok());
  EXPECT_EQ(store.start_step(), 40u);
  EXPECT_TRUE(store.joins_running_job());
  // Asked again for that step: a part one step ahead (the worker killed
  // between its pushes) is answered as it was then.
  ASSERT_FALSE(kv.pull_versions().empty());
  EXPECT_EQ(kv.pull_versions().back(), 40u);
  for (size_t k = 0; k < kv.store().size(); ++k)
    EXPECT_EQ(model->parameters()[k].value, kv.store()[k]);
}

// A recovery opened while a restarted worker's first pull waits (a server
// died with it, and came back later): the pull ends Aborted, and the worker
// starts at the recovery's step. Before, it failed, and exited.
TEST(RemoteStoreTest, ARecoveryOpenedDuringTheFirstPullIsJoinedNotFailed) {
  FakeKVWorker kv;
  kv.SetVersion(40);
  kv.Hold();
  auto model = trainer::MakeModel("mlp");
  model->Initialize(7);
  RemoteStore store(&kv, /*sync=*/true, PerLayer(false));
  std::thread server_restart([&] {
    kv.AwaitBlockedWait();
    kv.RollBack(30, kv.store());
    kv.Release();
  });
  const Status init = store.Init(*model);
  server_restart.join();
  ASSERT_TRUE(init.ok()) << init.message();
  EXPECT_EQ(store.start_step(), 30u);
  EXPECT_FALSE(store.joins_running_job()) << "the recovery's step is every worker's";
}

// In an async job a worker's steps are its own, and the servers' versions
// count every worker's updates: a worker starts at the step it (or the
// process it replaced) said last, and takes the newest values.
TEST(RemoteStoreTest, AnAsyncWorkerStartsAtItsOwnStepWithTheNewestValues) {
  for (uint64_t said_last : {0, 12}) {
    FakeKVWorker kv;
    kv.SetVersion(40);
    kv.SetStepSaidLast(said_last);
    auto model = trainer::MakeModel("mlp");
    model->Initialize(7);
    RemoteStore store(&kv, /*sync=*/false, PerLayer(false));
    ASSERT_TRUE(store.Init(*model).ok());
    EXPECT_EQ(store.start_step(), said_last);
    EXPECT_FALSE(store.joins_running_job());
    EXPECT_EQ(kv.pull_versions(), std::vector<uint64_t>{0});
  }
}

}  // namespace
}  // namespace kubeps
