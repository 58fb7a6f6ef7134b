#include "common/stop_token.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <thread>

#include <grpcpp/client_context.h>

namespace kubeps {

void StopToken::RequestStop() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopped_.exchange(true)) return;
  for (grpc::ClientContext* context : calls_) context->TryCancel();
  stopping_.notify_all();
}

bool StopToken::SleepFor(std::chrono::milliseconds duration) {
  std::unique_lock<std::mutex> lock(mutex_);
  return !stopping_.wait_for(lock, duration, [this] { return stopped_.load(); });
}

StopToken::CallGuard::CallGuard(StopToken* token, grpc::ClientContext* context)
    : token_(token), context_(context) {
  if (!token_) return;
  std::lock_guard<std::mutex> lock(token_->mutex_);
  // Cancelled before it starts: gRPC then ends it as soon as it starts.
  if (token_->stopped_) context_->TryCancel();
  token_->calls_.insert(context_);
}

StopToken::CallGuard::~CallGuard() {
  if (!token_) return;
  std::lock_guard<std::mutex> lock(token_->mutex_);
  token_->calls_.erase(context_);
}

namespace {

int g_signal_pipe[2] = {-1, -1};
volatile std::sig_atomic_t g_stop_signal = 0;

void OnStopSignal(int signal) {
  if (!g_stop_signal) g_stop_signal = signal;
  const int saved_errno = errno;
  [[maybe_unused]] ssize_t written = ::write(g_signal_pipe[1], "x", 1);
  errno = saved_errno;
}

}  // namespace

void StopOnSignals(StopToken* token) {
  if (::pipe2(g_signal_pipe, O_CLOEXEC) != 0) return;  // then the signals act as by default
  std::thread([token] {
    char c;
    while (::read(g_signal_pipe[0], &c, 1) < 0 && errno == EINTR) {
    }
    token->RequestStop();
  }).detach();
  std::signal(SIGTERM, OnStopSignal);
  std::signal(SIGINT, OnStopSignal);
}

int StopSignal() { return static_cast<int>(g_stop_signal); }

}  // namespace kubeps
