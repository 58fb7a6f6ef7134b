#include "ps-server/checkpoint_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>

#include "common/termination_message.h"
#include "ps-server/checkpoint_format.h"
#include "ps-server/durable_file.h"

namespace kubeps {
namespace fs = std::filesystem;

namespace {

// What a store writes, the one name of each step's file:
// "step-" and the step in 20 digits, then ".ckpt".
bool ParseCheckpointName(const std::string& name, uint64_t* step) {
  constexpr size_t kDigits = 20;
  const std::string prefix = "step-", suffix = ".ckpt";
  if (name.size() != prefix.size() + kDigits + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(prefix.size() + kDigits, suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string digits = name.substr(prefix.size(), kDigits);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return false;
  errno = 0;
  const unsigned long long parsed = std::strtoull(digits.c_str(), nullptr, 10);
  if (errno == ERANGE) return false;
  *step = parsed;
  return true;
}

// The run's id as "<dir>/run" records it; empty where none is recorded. A
// file that is there but cannot be read is an error, never "none".
Status ReadRunFile(const std::string& path, std::string* recorded) {
  Status read = ReadWholeFile(path, recorded);
  if (read.IsNotFound()) return Status::Ok();
  recorded->erase(std::min(recorded->find('\n'), recorded->size()));
  return read;
}

constexpr char kRunFile[] = "run";

// Calls `visit` with each entry of `dir`. An error listing it is returned,
// never taken for the end of the folder.
Status ForEachEntry(const std::string& dir,
                    const std::function<void(const fs::directory_entry&)>& visit) {
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error))
    visit(*it);
  if (error) return Status::Error("cannot list " + dir + ": " + error.message());
  return Status::Ok();
}

}  // namespace

Status CheckpointStore::Open(const std::string& dir, std::unique_ptr<CheckpointStore>* out) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) return Status::Error("checkpoint folder " + dir + ": " + error.message());
  out->reset(new CheckpointStore(dir));
  return Status::Ok();
}

Status CheckpointStore::Hold(const FolderHolder& me, StopToken* stop,
                             const FolderLockWait& waiting) {
  // A second lock of this process on NFS would be the same lock, which
  // closing the first descriptor lets go of.
  if (lock_) return Status::Internal("checkpoint folder " + dir_ + " is held already");
  if (Status s = CheckpointFolderLock::Take(dir_, me, stop, waiting, &lock_); !s.ok()) return s;
  // Temporary files of writes a killed process left (each as big as its
  // state), which no one else would ever remove.
  auto remove_if_temporary = [](const fs::directory_entry& entry) {
    const std::string name = entry.path().filename().string();
    const size_t suffix = sizeof kTemporarySuffix - 1;
    if (name.size() > suffix && name.compare(name.size() - suffix, suffix, kTemporarySuffix) == 0)
      ::unlink(entry.path().c_str());
  };
  return ForEachEntry(dir_, remove_if_temporary);
}

Status CheckpointStore::CheckStillOurs() const {
  return lock_ ? lock_->CheckStillOurs() : Status::Ok();
}

std::string CheckpointStore::PathOf(uint64_t step) const {
  char name[48];
  std::snprintf(name, sizeof name, "/step-%020llu.ckpt", static_cast<unsigned long long>(step));
  return dir_ + name;
}

Status CheckpointStore::Steps(std::vector<uint64_t>* steps) const {
  if (Status s = ListSteps(steps); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(abandoned_mutex_);
  steps->erase(std::remove_if(steps->begin(), steps->end(),
                              [this](uint64_t step) { return abandoned_.count(step) != 0; }),
               steps->end());
  return Status::Ok();
}

Status CheckpointStore::ListSteps(std::vector<uint64_t>* steps) const {
  steps->clear();
  Status listed = ForEachEntry(dir_, [&](const fs::directory_entry& entry) {
    uint64_t step;
    std::error_code type_error;
    if (ParseCheckpointName(entry.path().filename().string(), &step) &&
        entry.is_regular_file(type_error)) {
      steps->push_back(step);
    }
  });
  std::sort(steps->begin(), steps->end());
  return listed;
}

Status CheckpointStore::Write(const v1::ShardCheckpoint& checkpoint) {
  if (Status s = CheckStillOurs(); !s.ok()) return s;
  if (Status s = ReplaceDurably(
          dir_, PathOf(checkpoint.step()),
          [&](google::protobuf::io::ZeroCopyOutputStream* out) {
            return WriteCheckpointFile(checkpoint, out);
          },
          // A write may take a while on NFS: a successor may have taken over meanwhile.
          [this] { return CheckStillOurs(); });
      !s.ok())
    return s;
  {
    std::lock_guard<std::mutex> lock(abandoned_mutex_);
    abandoned_.erase(checkpoint.step());  // the file is the new timeline's now
  }
  RetryAbandoned();
  std::vector<uint64_t> steps;
  if (!Steps(&steps).ok()) return Status::Ok();  // written; pruned after a later write
  const int64_t kept = keep_step_;
  for (size_t i = 0; i + kKeep < steps.size(); ++i) {
    const auto step = static_cast<int64_t>(steps[i]);
    const bool may_become_common = step > kept && steps.size() - i <= kMaxKept;
    if (step != kept && !may_become_common) ::unlink(PathOf(steps[i]).c_str());
  }
  return Status::Ok();
}

Status CheckpointStore::ClaimForRun(const std::string& run_id, bool resume, size_t* removed) {
  *removed = 0;
  if (run_id.empty()) return Status::Ok();
  std::string recorded;
  if (Status s = ReadRunFile(dir_ + "/" + kRunFile, &recorded); !s.ok()) return s;
  if (recorded == run_id) return Status::Ok();
  if (!resume) {
    if (Status s = RemoveFrom(0, removed); !s.ok()) return s;
  }
  const std::string line = run_id + "\n";
  return ReplaceDurably(dir_, dir_ + "/" + kRunFile, line);
}

Status CheckpointStore::RemoveAll() {
  size_t removed;
  return RemoveFrom(0, &removed);
}

Status CheckpointStore::RemoveAfter(uint64_t step) {
  size_t removed;
  return RemoveFrom(step + 1, &removed, /*abandon=*/true);
}

Status CheckpointStore::RemoveFrom(uint64_t first, size_t* removed, bool abandon) {
  *removed = 0;
  if (Status s = CheckStillOurs(); !s.ok()) return s;
  std::vector<uint64_t> steps;
  if (Status s = ListSteps(&steps); !s.ok()) return s;
  std::string failed;
  for (uint64_t step : steps) {
    if (step < first) continue;
    if (::unlink(PathOf(step).c_str()) != 0 && errno != ENOENT) {
      const std::string error = "cannot delete " + PathOf(step) + ": " + std::strerror(errno);
      if (!abandon) return Status::Error(error);
      failed += (failed.empty() ? "" : "; ") + error;
      std::lock_guard<std::mutex> lock(abandoned_mutex_);
      abandoned_.insert(step);
      continue;
    }
    std::lock_guard<std::mutex> lock(abandoned_mutex_);
    abandoned_.erase(step);
    ++*removed;
  }
  if (failed.empty()) return Status::Ok();
  return Status::Error(failed +
                       " (of a timeline the job left: never restored, and deleted at a later "
                       "checkpoint write)");
}

void CheckpointStore::RetryAbandoned() {
  std::set<uint64_t> abandoned;
  {
    // Not held while unlinking: on a stale mount that may block, and the
    // heartbeat lists the steps under it.
    std::lock_guard<std::mutex> lock(abandoned_mutex_);
    abandoned = abandoned_;
  }
  for (uint64_t step : abandoned) {
    if (::unlink(PathOf(step).c_str()) != 0 && errno != ENOENT) continue;
    std::lock_guard<std::mutex> lock(abandoned_mutex_);
    abandoned_.erase(step);
  }
}

void CheckpointStore::SetAside(uint64_t step, std::string* skipped) const {
  const std::string path = PathOf(step);
  const std::string aside = path + ".damaged";
  if (std::rename(path.c_str(), aside.c_str()) != 0) {
    if (skipped) *skipped += "cannot rename " + path + " aside: " + std::strerror(errno) + "; ";
    return;
  }
  if (skipped) *skipped += "renamed aside to " + aside + "; ";
}

Status CheckpointStore::SetAsideDamaged(std::string* skipped) const {
  std::vector<uint64_t> steps;
  if (Status s = Steps(&steps); !s.ok()) return s;
  v1::ShardCheckpoint checkpoint;
  for (uint64_t step : steps) {
    bool damaged = false;
    Status s = ReadFile(step, &checkpoint, &damaged);
    if (s.ok()) continue;
    if (!damaged) return s;
    if (skipped) *skipped += s.message() + ", ";
    SetAside(step, skipped);
  }
  return Status::Ok();
}

Status CheckpointStore::Read(uint64_t step, v1::ShardCheckpoint* checkpoint) const {
  {
    std::lock_guard<std::mutex> lock(abandoned_mutex_);
    if (abandoned_.count(step) != 0)  // named from a listing older than the rollback
      return Status::NotFound("the checkpoint of step " + std::to_string(step) + " in " + dir_ +
                              " is of a timeline a rollback left");
  }
  bool damaged = false;
  return ReadFile(step, checkpoint, &damaged);
}

Status CheckpointStore::ReadFile(uint64_t step, v1::ShardCheckpoint* checkpoint,
                                 bool* damaged) const {
  *damaged = false;
  const std::string path = PathOf(step);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound("no checkpoint " + path);
    return Status::Error("cannot open " + path + ": " + std::strerror(errno));
  }
  Status read = ReadCheckpointFile(fd, path, checkpoint, damaged);
  ::close(fd);
  if (!read.ok()) return read;
  if (checkpoint->step() != step) {
    *damaged = true;
    return Status::Error("checkpoint " + path + " is damaged: it holds step " +
                         std::to_string(checkpoint->step()));
  }
  return Status::Ok();
}

Status CheckpointStore::ReadLatest(v1::ShardCheckpoint* checkpoint, bool* found,
                                   std::string* skipped) const {
  *found = false;
  std::vector<uint64_t> steps;
  if (Status s = Steps(&steps); !s.ok()) return s;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    bool damaged = false;
    Status s = ReadFile(*it, checkpoint, &damaged);
    if (s.ok()) {
      *found = true;
      return Status::Ok();
    }
    if (!damaged) return s;
    if (skipped) *skipped += s.message() + ", ";
    SetAside(*it, skipped);
  }
  return Status::Ok();
}

Status RefuseHalfResharded(const std::string& dir) {
  const fs::path folder = fs::path(dir).parent_path();
  std::error_code error;
  if (!fs::exists(folder / kReshardJournal, error)) return Status::Ok();
  return Status::FailedPrecondition(
             folder.string() +
             " is halfway through a reshard that was stopped between its moves (" +
             (folder / kReshardJournal).string() +
             "): run kubeps reshard on it again, while no job runs on it, to finish it")
      .WithReason(kReasonCheckpointMismatch);
}

}  // namespace kubeps
