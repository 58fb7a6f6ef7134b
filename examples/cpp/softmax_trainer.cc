// A user's own C++ training program on kubeps: softmax regression on
// Fashion-MNIST, trained against the job's parameter servers through the
// pod's kubeps-agent sidecar (KVWorker::Connect). It runs as a worker's own
// command beside `kubeps-agent --serve` (KUBEPS_SOCKET_DIR names their
// shared directory) in a sync job. Where the servers run an optimizer (sgd,
// momentum or adam) they update the parameters and this program only
// computes gradients. With --local-momentum the job's optimizer is none:
// the servers average the gradients and this program keeps the parameters
// and its momentum, rolls them back with the job (RollbackCopies) and, with
// --state-dir, saves them at the checkpoint steps for a restarted process.
//
//   softmax_trainer [--epochs=1] [--batch-size=64] [--seed=1]
//                   [--data-dir=/usr/share/datasets/fashion-mnist]
//                   [--zero-copy]
//                   [--local-momentum=0.9 [--learning-rate=0.1] [--state-dir=DIR]]
//
// Each step's batch is a pure function of the seed, the step and the rank,
// so a restarted process that resumes at the servers' step sees exactly
// the data it would have seen. --zero-copy computes gradients straight into
// the shared-memory regions the agent pushes from and reads parameters
// where it pulls them to.
//
// Prints progress, then "rank R: test accuracy X" and a hash of the final
// parameters.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fashion_mnist.h"
#include "own_state.h"
#include "worker-agent/kv/kv_worker.h"
#include "worker-agent/kv/rollback_copies.h"

namespace {

constexpr int kClasses = 10;

struct Flags {
  int epochs = 1;
  int batch_size = 64;  // per worker
  uint64_t seed = 1;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  bool zero_copy = false;
  float local_momentum = -1;  // < 0: the servers' optimizer updates
  float learning_rate = 0.1f;
  std::string state_dir;  // the program's own checkpoints, one folder a rank

  bool own_optimizer() const { return local_momentum >= 0; }
};

bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t equals = arg.find('=');
    const std::string name = arg.substr(0, equals);
    const std::string value = equals == std::string::npos ? "" : arg.substr(equals + 1);
    if (name == "--epochs") {
      flags->epochs = std::atoi(value.c_str());
    } else if (name == "--batch-size") {
      flags->batch_size = std::atoi(value.c_str());
    } else if (name == "--seed") {
      flags->seed = std::strtoull(value.c_str(), nullptr, 10);
    } else if (name == "--data-dir") {
      flags->data_dir = value;
    } else if (name == "--zero-copy") {
      flags->zero_copy = true;
    } else if (name == "--local-momentum") {
      flags->local_momentum = std::strtof(value.c_str(), nullptr);
    } else if (name == "--learning-rate") {
      flags->learning_rate = std::strtof(value.c_str(), nullptr);
    } else if (name == "--state-dir") {
      flags->state_dir = value;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", arg.c_str());
      return false;
    }
  }
  if (!flags->state_dir.empty() && !flags->own_optimizer()) {
    std::fprintf(stderr,
                 "--state-dir is for --local-momentum: otherwise the servers hold the "
                 "parameters\n");
    return false;
  }
  return flags->epochs >= 1 && flags->batch_size >= 1 && flags->learning_rate > 0;
}

int Fail(const std::string& what, const kubeps::Status& status) {
  std::fprintf(stderr, "softmax_trainer: %s: %s\n", what.c_str(), status.message().c_str());
  return 1;
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "softmax_trainer: %s\n", what.c_str());
  return 1;
}

// The program's own optimizer goes with servers that only average the
// gradients, and only with those: the values pulled are then the mean of
// the gradients, not parameters.
bool CheckOptimizer(const Flags& flags, const kubeps::KVWorker& kv, std::string* error) {
  const std::string servers = kv.ServersOptimizer();
  if (servers.empty() || (servers == "none") == flags.own_optimizer()) return true;
  *error = flags.own_optimizer()
               ? "--local-momentum needs the job's spec.optimizer.name none, not " + servers +
                     ": this program would apply its own update to parameters the servers "
                     "updated already"
               : "the job's spec.optimizer.name is none: the servers only average the "
                 "gradients, so this program must update the parameters itself "
                 "(--local-momentum, and --state-dir for a restarted process)";
  return false;
}

// After the job rolled back to `step`: the program's own state of that
// step from its copies in memory, or else from its file, and the files of
// later steps, another timeline's, deleted.
bool RollBackOwnState(uint64_t step, kubeps::RollbackCopies* copies, example::StateFiles* files,
                      std::string* error) {
  if (files && !files->DropAfter(step, error)) return false;
  if (copies->RollBack(step) || (files && files->Load(step, error))) return true;
  if (!files) {
    *error = "the job rolled back to step " + std::to_string(step) +
             ", and this program kept no copy of its state of that step (--state-dir keeps "
             "them on disk)";
  }
  return false;
}

// splitmix64: a small generator whose output is the same everywhere (the
// standard library's distributions differ between implementations).
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The order of the training examples in `epoch`: a Fisher-Yates shuffle
// keyed by the seed and the epoch only.
std::vector<int> EpochOrder(int count, uint64_t seed, uint64_t epoch) {
  std::vector<int> order(count);
  for (int i = 0; i < count; ++i) order[i] = i;
  uint64_t state = Mix(seed ^ Mix(epoch));
  for (int i = count - 1; i > 0; --i) {
    state = Mix(state);
    std::swap(order[i], order[state % static_cast<uint64_t>(i + 1)]);
  }
  return order;
}

// FNV-1a over the bytes of n floats, continuing from `hash`.
uint64_t Fnv1a(const float* values, size_t n, uint64_t hash) {
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(values);
  for (size_t i = 0; i < n * sizeof(float); ++i) hash = (hash ^ bytes[i]) * 0x100000001b3ull;
  return hash;
}

// Softmax regression: logits = W x + b, W of kClasses x pixels.
class SoftmaxModel {
 public:
  explicit SoftmaxModel(int pixels) : pixels_(pixels) {}

  // Gradients of the mean cross-entropy over `examples` at (w, b), written
  // to gw and gb; returns the mean loss.
  float Gradients(const example::Split& data, const int* examples, int n, const float* w,
                  const float* b, float* gw, float* gb) const {
    std::memset(gw, 0, sizeof(float) * kClasses * pixels_);
    std::memset(gb, 0, sizeof(float) * kClasses);
    float loss = 0, p[kClasses];
    for (int e = 0; e < n; ++e) {
      const float* x = &data.images[static_cast<size_t>(examples[e]) * pixels_];
      const int label = data.labels[examples[e]];
      Probabilities(x, w, b, p);
      loss -= std::log(std::max(p[label], 1e-12f));
      for (int c = 0; c < kClasses; ++c) {
        const float d = (p[c] - (c == label ? 1.0f : 0.0f)) / n;
        gb[c] += d;
        float* row = gw + static_cast<size_t>(c) * pixels_;
        for (int i = 0; i < pixels_; ++i) row[i] += d * x[i];
      }
    }
    return loss / n;
  }

  double Accuracy(const example::Split& data, const float* w, const float* b) const {
    int correct = 0;
    float p[kClasses];
    for (int e = 0; e < data.count; ++e) {
      Probabilities(&data.images[static_cast<size_t>(e) * pixels_], w, b, p);
      int best = 0;
      for (int c = 1; c < kClasses; ++c) best = p[c] > p[best] ? c : best;
      correct += best == data.labels[e];
    }
    return static_cast<double>(correct) / data.count;
  }

 private:
  void Probabilities(const float* x, const float* w, const float* b, float* p) const {
    float top = -INFINITY;
    for (int c = 0; c < kClasses; ++c) {
      const float* row = w + static_cast<size_t>(c) * pixels_;
      float z = b[c];
      for (int i = 0; i < pixels_; ++i) z += row[i] * x[i];
      p[c] = z;
      top = std::max(top, z);
    }
    float sum = 0;
    for (int c = 0; c < kClasses; ++c) sum += p[c] = std::exp(p[c] - top);
    for (int c = 0; c < kClasses; ++c) p[c] /= sum;
  }

  const int pixels_;
};

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) return 2;
  example::Split train, test;
  std::string error;
  if (!example::LoadSplit(flags.data_dir, "train", &train, &error) ||
      !example::LoadSplit(flags.data_dir, "t10k", &test, &error)) {
    std::fprintf(stderr, "softmax_trainer: %s\n", error.c_str());
    return 1;
  }

  // The pod's agent: it holds this worker's rank, and the servers' state
  // outlives this process.
  std::unique_ptr<kubeps::KVWorker> kv;
  if (kubeps::Status s = kubeps::KVWorker::Connect(kubeps::SidecarOptions(), &kv); !s.ok()) {
    return Fail("connect to the kubeps agent", s);
  }
  if (!CheckOptimizer(flags, *kv, &error)) return Fail(error);
  const int rank = kv->rank(), workers = kv->size();
  const int pixels = train.pixels_per_image;
  const std::vector<uint64_t> sizes = {static_cast<uint64_t>(kClasses) * pixels, kClasses};

  // Key 0 is W, key 1 is b. Zeros are a fine start for a convex model; rank
  // 0's values are the ones stored (a restarted process keeps the servers').
  std::vector<float> w(sizes[0], 0.0f), b(sizes[1], 0.0f), gw(sizes[0]), gb(sizes[1]);
  // With the program's own optimizer: its momentum, and where the servers'
  // mean of the gradients lands.
  std::vector<float> vw, vb, mean_w, mean_b;
  std::unique_ptr<example::StateFiles> files;
  if (flags.own_optimizer()) {
    vw.assign(sizes[0], 0.0f), vb.assign(sizes[1], 0.0f);
    mean_w.resize(sizes[0]), mean_b.resize(sizes[1]);
    if (!flags.state_dir.empty()) {
      files = std::make_unique<example::StateFiles>(
          flags.state_dir + "/rank-" + std::to_string(rank),
          std::vector<example::StateRegion>{{w.data(), w.size() * sizeof(float)},
                                            {b.data(), b.size() * sizeof(float)},
                                            {vw.data(), vw.size() * sizeof(float)},
                                            {vb.data(), vb.size() * sizeof(float)}});
      if (!files->Open(&error)) return Fail(error);
      // The job starts this process at a step it saved, or fails saying so.
      if (kubeps::Status s = kv->HoldsOwnState(files->Steps()); !s.ok()) {
        return Fail("say the steps saved", s);
      }
    }
  }
  // Named, the servers refuse a worker whose program declares other tensors.
  kv->NameTensors({"softmax.weight", "softmax.bias"});
  if (kubeps::Status s = kv->InitTensors({w.data(), b.data()}, sizes); !s.ok()) {
    return Fail("InitTensors", s);
  }
  // Where the parameters are read, the gradients written and the pulled
  // values land: this program's own buffers (the client copies to and from
  // the shared file), or, with --zero-copy, the shared regions themselves.
  // The pulled values are the parameters, or with the program's own
  // optimizer the mean of the workers' gradients.
  float* params[2] = {w.data(), b.data()};
  float* grads[2] = {gw.data(), gb.data()};
  float* pulled[2] = {w.data(), b.data()};
  if (flags.own_optimizer()) pulled[0] = mean_w.data(), pulled[1] = mean_b.data();
  if (flags.zero_copy && kv->SharedValues(0)) {
    for (uint32_t key = 0; key < 2; ++key) {
      pulled[key] = kv->SharedValues(key);
      grads[key] = kv->SharedGrads(key);
      if (!flags.own_optimizer()) params[key] = pulled[key];
    }
  }
  // The servers' parameters and their step, all of one step: 0 for a new
  // job, the step this rank computes next for a restarted process.
  uint64_t step = 0;
  if (kubeps::Status s = kv->PullAtOneStep({pulled[0], pulled[1]}, 0, &step); !s.ok()) {
    return Fail("pull the initial parameters", s);
  }
  // This process's own state of that step; its files of later steps are of
  // a timeline the job left (or of an earlier run over this folder).
  if (files && (!files->DropAfter(step, &error) || (step > 0 && !files->Load(step, &error)))) {
    return Fail(error);
  }
  const int steps_per_epoch = train.count / (flags.batch_size * workers);
  const uint64_t total_steps = static_cast<uint64_t>(flags.epochs) * steps_per_epoch;
  std::printf("rank %d of %d: steps %llu to %llu, %d per epoch%s%s\n", rank, workers,
              static_cast<unsigned long long>(step), static_cast<unsigned long long>(total_steps),
              steps_per_epoch, grads[0] == gw.data() ? "" : ", zero copy",
              flags.own_optimizer() ? ", own optimizer" : "");
  std::fflush(stdout);

  // What a rollback takes back with the servers: the program's own state,
  // copied in memory at the steps a rollback may go back to.
  kubeps::RollbackCopies copies(*kv);
  if (flags.own_optimizer()) {
    for (std::vector<float>* region : {&w, &b, &vw, &vb}) {
      copies.Track(region->data(), region->size() * sizeof(float));
    }
  }
  const uint64_t interval = kv->CheckpointInterval();
  std::optional<uint64_t> saved;  // the step of this run's newest own checkpoint

  SoftmaxModel model(pixels);
  std::vector<int> order;
  uint64_t order_epoch = UINT64_MAX;
  float loss_sum = 0;
  int losses = 0;
  while (step < total_steps) {
    if (flags.own_optimizer()) {
      copies.BeforeStep(step);
      // Saved at the steps the servers checkpoint, and where the run starts.
      const bool checkpoint_step = !saved || (interval > 0 && step % interval == 0);
      if (files && checkpoint_step && saved != step) {
        if (!files->Save(step, &error)) return Fail(error);
        saved = step;
      }
    }
    const uint64_t epoch = step / steps_per_epoch;
    if (epoch != order_epoch) {
      order = EpochOrder(train.count, flags.seed, epoch);
      order_epoch = epoch;
    }
    const size_t first = (step % steps_per_epoch * workers + rank) * flags.batch_size;
    ++losses;
    loss_sum += model.Gradients(train, &order[first], flags.batch_size, params[0], params[1],
                                grads[0], grads[1]);
    // Push this step's gradients; the servers apply them once every worker
    // has pushed, and the pull brings the parameters of step + 1 (or the
    // mean of this step's gradients).
    kubeps::Status s = kv->Wait(kv->PushPull({grads[0], grads[1]}, {pulled[0], pulled[1]}, step));
    if (s.IsAborted()) {
      // A parameter server restarted from its checkpoint: the job rolled
      // back. Resume from its step with its parameters.
      if (kubeps::Status r = kv->Recover(&step); !r.ok()) return Fail("recover", r);
      if (flags.own_optimizer()) {
        if (!RollBackOwnState(step, &copies, files.get(), &error)) return Fail(error);
        saved.reset();  // saved again: its file may be older than those kept
      } else if (kubeps::Status r = kv->Wait(kv->Pull({pulled[0], pulled[1]}, step)); !r.ok()) {
        return Fail("pull after the rollback", r);
      }
      std::printf("rank %d: rolled back to step %llu\n", rank,
                  static_cast<unsigned long long>(step));
      continue;
    }
    if (!s.ok()) return Fail("push_pull of step " + std::to_string(step), s);
    if (flags.own_optimizer()) {
      example::MomentumStep(flags.learning_rate, flags.local_momentum, pulled[0], vw.data(),
                            w.data(), w.size());
      example::MomentumStep(flags.learning_rate, flags.local_momentum, pulled[1], vb.data(),
                            b.data(), b.size());
    }
    ++step;
    if (step % 100 == 0 || step == total_steps) {
      std::printf("rank %d: step %llu/%llu loss %.4f\n", rank,
                  static_cast<unsigned long long>(step),
                  static_cast<unsigned long long>(total_steps), loss_sum / losses);
      std::fflush(stdout);
      loss_sum = 0;
      losses = 0;
    }
  }

  // The servers checkpoint the last step too: a process restarted after
  // its last push, once another worker has finished (the job no longer
  // rolls back), starts there.
  if (files && saved != step && !files->Save(step, &error)) return Fail(error);
  std::printf("rank %d: test accuracy %.4f\n", rank, model.Accuracy(test, params[0], params[1]));
  // Sync workers end with the same parameters, bit for bit, however often
  // they were restarted: the job's tests compare this line.
  std::printf("rank %d: parameters fnv1a %016llx\n", rank,
              static_cast<unsigned long long>(
                  Fnv1a(params[1], sizes[1], Fnv1a(params[0], sizes[0], 0xcbf29ce484222325ull))));
  std::fflush(stdout);
  if (kubeps::Status s = kv->Finish(); !s.ok()) return Fail("finish", s);
  return 0;
}
