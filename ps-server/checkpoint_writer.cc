#include "ps-server/checkpoint_writer.h"

namespace kubeps {

CheckpointWriter::CheckpointWriter(Write write)
    : write_(std::move(write)), thread_([this] { Run(); }) {}

CheckpointWriter::~CheckpointWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ending_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void CheckpointWriter::Hand(std::unique_ptr<v1::ShardCheckpoint> checkpoint) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return queued_ == nullptr && !writing_; });
    queued_ = std::move(checkpoint);
  }
  changed_.notify_all();
}

void CheckpointWriter::Drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return queued_ == nullptr && !writing_; });
}

std::unique_ptr<v1::ShardCheckpoint> CheckpointWriter::Blank() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (written_) return std::move(written_);
  return std::make_unique<v1::ShardCheckpoint>();
}

void CheckpointWriter::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return queued_ != nullptr || ending_; });
    if (queued_ == nullptr) return;  // ending, and everything handed over is written
    std::unique_ptr<v1::ShardCheckpoint> checkpoint = std::move(queued_);
    writing_ = true;
    lock.unlock();
    write_(*checkpoint);
    lock.lock();
    written_ = std::move(checkpoint);
    writing_ = false;
    changed_.notify_all();
  }
}

}  // namespace kubeps
