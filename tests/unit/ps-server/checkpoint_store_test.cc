// A shard's checkpoint files (ps-server/checkpoint_store.h): the common step
// survives pruning; damaged files are set aside, and a file or the folder
// that cannot be read now is an error, neither damage nor "none"; only files
// named as the store names them are steps; a write that fails, or a process
// killed in the middle of one, leaves no temporary file to fill the volume;
// and without resume another run's checkpoints go, but never because the run
// file could not be read.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ps-server/checkpoint_store.h"

namespace kubeps {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// Under $TMPDIR: the test script gives each run a folder it removes at the end.
std::string TempDir() {
  std::string pattern = std::filesystem::temp_directory_path() / "kubeps-ckpt-test-XXXXXX";
  return ::mkdtemp(pattern.data());
}

std::vector<uint64_t> StepsOf(const CheckpointStore& store) {
  std::vector<uint64_t> steps;
  Status listed = store.Steps(&steps);
  EXPECT_TRUE(listed.ok()) << listed.message();
  return steps;
}

v1::ShardCheckpoint Step(uint64_t step) {
  v1::ShardCheckpoint checkpoint;
  checkpoint.set_step(step);
  return checkpoint;
}

TEST(CheckpointStoreTest, TheCommonStepSurvivesPruning) {
  std::unique_ptr<CheckpointStore> store;
  ASSERT_TRUE(CheckpointStore::Open(TempDir(), &store).ok());
  store->KeepStep(300);  // older ones beyond the newest 3 go; newer ones may become it
  for (uint64_t step : {100, 200, 300, 400, 500, 600, 700})
    ASSERT_TRUE(store->Write(Step(step)).ok());
  EXPECT_THAT(StepsOf(*store), ElementsAre(300, 400, 500, 600, 700));
}

// The scheduler hears of a lagging peer's checkpoints a heartbeat late: a
// step newer than the common one may become it, and was pruned before
// (CI saw a recovery go back to step 0 instead of 50 under load).
TEST(CheckpointStoreTest, StepsNewerThanTheCommonOneAreKeptUpToABound) {
  std::unique_ptr<CheckpointStore> store;
  ASSERT_TRUE(CheckpointStore::Open(TempDir(), &store).ok());
  store->KeepStep(0);
  for (uint64_t step : {0, 50, 100, 150, 200}) ASSERT_TRUE(store->Write(Step(step)).ok());
  EXPECT_THAT(StepsOf(*store), ElementsAre(0, 50, 100, 150, 200));
  store->KeepStep(50);
  ASSERT_TRUE(store->Write(Step(250)).ok());
  EXPECT_THAT(StepsOf(*store), ElementsAre(50, 100, 150, 200, 250));
  for (uint64_t step = 300; step <= 1500; step += 50) ASSERT_TRUE(store->Write(Step(step)).ok());
  const std::vector<uint64_t> steps = StepsOf(*store);
  EXPECT_EQ(steps.size(), size_t{CheckpointStore::kMaxKept} + 1) << "the common step and the bound";
  EXPECT_EQ(steps.front(), 50u);
  EXPECT_EQ(steps.back(), 1500u);
}

TEST(CheckpointStoreTest, DamagedFileIsSetAsideAndNotLoaded) {
  std::unique_ptr<CheckpointStore> store;
  const std::string dir = TempDir();
  ASSERT_TRUE(CheckpointStore::Open(dir, &store).ok());
  ASSERT_TRUE(store->Write(Step(100)).ok());
  ASSERT_TRUE(store->Write(Step(200)).ok());
  const std::string newest = dir + "/step-00000000000000000200.ckpt";
  std::ofstream(newest, std::ios::trunc) << "\x08\x05garbage";
  v1::ShardCheckpoint loaded;
  bool found = false;
  std::string skipped;
  ASSERT_TRUE(store->ReadLatest(&loaded, &found, &skipped).ok());
  ASSERT_TRUE(found);
  EXPECT_EQ(loaded.step(), 100u);
  EXPECT_THAT(skipped, HasSubstr(newest + ".damaged"));
  EXPECT_THAT(StepsOf(*store), ElementsAre(100));
  EXPECT_TRUE(std::ifstream(newest + ".damaged").good());
}

// spec.checkpoint.resume false starts fresh over another run's checkpoints,
// and a server of this run that restarts keeps its own: the recovery its
// restart calls for needs them, however the scheduler came back.
TEST(CheckpointStoreTest, WithoutResumeAnotherRunsCheckpointsAreDeletedAndThisRunsKept) {
  std::unique_ptr<CheckpointStore> store;
  const std::string dir = TempDir();
  ASSERT_TRUE(CheckpointStore::Open(dir, &store).ok());
  size_t removed = 99;
  ASSERT_TRUE(store->ClaimForRun("run-a", /*resume=*/false, &removed).ok());
  EXPECT_EQ(removed, 0u);
  for (uint64_t step : {100, 200}) ASSERT_TRUE(store->Write(Step(step)).ok());
  // run-a's server restarted: its own checkpoints stay.
  ASSERT_TRUE(store->ClaimForRun("run-a", false, &removed).ok());
  EXPECT_EQ(removed, 0u);
  EXPECT_THAT(StepsOf(*store), ElementsAre(100, 200));
  // The job run again without resume: run-a's go.
  ASSERT_TRUE(store->ClaimForRun("run-b", false, &removed).ok());
  EXPECT_EQ(removed, 2u);
  EXPECT_THAT(StepsOf(*store), ElementsAre());
  ASSERT_TRUE(store->Write(Step(300)).ok());
  // Run again with resume: the new run takes them over, and keeps them
  // when one of its servers restarts without resume.
  ASSERT_TRUE(store->ClaimForRun("run-c", true, &removed).ok());
  ASSERT_TRUE(store->ClaimForRun("run-c", false, &removed).ok());
  EXPECT_EQ(removed, 0u);
  EXPECT_THAT(StepsOf(*store), ElementsAre(300));
  // No run recorded (a folder from before runs were): another run's.
  ASSERT_EQ(::unlink((dir + "/run").c_str()), 0);
  ASSERT_TRUE(store->ClaimForRun("run-c", false, &removed).ok());
  EXPECT_EQ(removed, 1u);
  // A server started by hand names no run: it deletes nothing.
  ASSERT_TRUE(store->Write(Step(400)).ok());
  ASSERT_TRUE(store->ClaimForRun("", false, &removed).ok());
  EXPECT_EQ(removed, 0u);
  EXPECT_THAT(StepsOf(*store), ElementsAre(400));
}

TEST(CheckpointStoreTest, RemoveAllDeletesEveryStep) {
  std::unique_ptr<CheckpointStore> store;
  ASSERT_TRUE(CheckpointStore::Open(TempDir(), &store).ok());
  ASSERT_TRUE(store->Write(Step(1)).ok());
  ASSERT_TRUE(store->Write(Step(2)).ok());
  ASSERT_TRUE(store->RemoveAll().ok());
  EXPECT_TRUE(StepsOf(*store).empty());
}

std::vector<std::string> TemporaryFiles(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A write that fails (here its rename: a folder stands where the file goes;
// on a full volume, the write itself) left its temporary file, as big as the
// shard's state, and each later step's attempt left another beside it.
TEST(CheckpointStoreTest, AWriteThatFailsLeavesNoTemporaryFile) {
  std::unique_ptr<CheckpointStore> store;
  const std::string dir = TempDir();
  ASSERT_TRUE(CheckpointStore::Open(dir, &store).ok());
  ASSERT_TRUE(store->Write(Step(1)).ok());
  ASSERT_EQ(::mkdir((dir + "/step-00000000000000000002.ckpt").c_str(), 0700), 0);
  Status s = store->Write(Step(2));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("step-00000000000000000002.ckpt"));
  EXPECT_THAT(TemporaryFiles(dir), IsEmpty());
  EXPECT_THAT(StepsOf(*store), ElementsAre(1)) << "a folder is no checkpoint";
}

// A server killed while it wrote a checkpoint (evicted, out of memory) left
// a temporary file that no later process removed.
// Removed once the folder is held, not when it is opened: a server waiting
// for the folder would otherwise remove the holder's write in progress.
TEST(CheckpointStoreTest, TemporaryFilesOfAKilledWriteAreRemovedOnceTheFolderIsHeld) {
  const std::string dir = TempDir();
  {
    std::unique_ptr<CheckpointStore> store;
    ASSERT_TRUE(CheckpointStore::Open(dir, &store).ok());
    ASSERT_TRUE(store->Write(Step(4)).ok());
  }
  std::ofstream(dir + "/step-00000000000000000005.ckpt.tmp") << std::string(4096, 'x');
  std::ofstream(dir + "/run.tmp") << "run-";
  std::unique_ptr<CheckpointStore> store;
  ASSERT_TRUE(CheckpointStore::Open(dir, &store).ok());
  EXPECT_THAT(TemporaryFiles(dir), ElementsAre("run.tmp", "step-00000000000000000005.ckpt.tmp"));
  StopToken stop;
  ASSERT_TRUE(
      store->Hold(FolderHolder::ThisProcess("run-a", "default/job", "server-0"), &stop, {}).ok());
  EXPECT_THAT(TemporaryFiles(dir), IsEmpty());
  EXPECT_THAT(StepsOf(*store), ElementsAre(4));
}

// A process taken for lost (its successor holds the folder now) changes
// nothing in it: no checkpoint written, none removed.
TEST(CheckpointStoreTest, AFolderTakenOverIsNotChanged) {
  const std::string dir = TempDir();
  std::unique_ptr<CheckpointStore> store;
  ASSERT_TRUE(CheckpointStore::Open(dir, &store).ok());
  StopToken stop;
  ASSERT_TRUE(
      store->Hold(FolderHolder::ThisProcess("run-a", "default/job", "server-0"), &stop, {}).ok());
  ASSERT_TRUE(store->Write(Step(4)).ok());
  std::ofstream(dir + "/owner")
      << FolderHolder::ThisProcess("run-a", "default/job", "server-0").Serialize();
  Status s = store->Write(Step(5));
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition) << s.message();
  EXPECT_THAT(s.message(), HasSubstr("was taken over by server-0 of job default/job"));
  EXPECT_EQ(store->RemoveAll().code(), Status::Code::kFailedPrecondition);
  EXPECT_THAT(StepsOf(*store), ElementsAre(4));
}

// Names sscanf's pattern also took: steps no checkpoint was read from, that
// could never be loaded, set aside or deleted, yet were reported to the
// scheduler and could be picked as the step to roll back to.
TEST(CheckpointStoreTest, OnlyFilesNamedAsTheStoreNamesThemAreSteps) {
  std::unique_ptr<CheckpointStore> store;
  const std::string dir = TempDir();
  ASSERT_TRUE(CheckpointStore::Open(dir, &store).ok());
  ASSERT_TRUE(store->Write(Step(3)).ok());
  for (const char* name :
       {"step-7.ckpt", "step--1.ckpt", "step-+5.ckpt", "step-00000000000000000005.ckpt foo",
        "step-00000000000000000006.ckptx", "step-00000000000000000003.ckpt.damaged"}) {
    std::ofstream(dir + "/" + name) << "x";
  }
  EXPECT_THAT(StepsOf(*store), ElementsAre(3));
}

// A run file that exists but cannot be read is not "no run recorded": taken
// for that, it had resume: false delete the checkpoints of this very run,
// which a server restarted mid-job needs.
TEST(CheckpointStoreTest, ARunFileThatCannotBeReadIsAnErrorAndDeletesNothing) {
  std::unique_ptr<CheckpointStore> store;
  const std::string dir = TempDir();
  ASSERT_TRUE(CheckpointStore::Open(dir, &store).ok());
  size_t removed = 0;
  ASSERT_TRUE(store->ClaimForRun("run-a", /*resume=*/false, &removed).ok());
  for (uint64_t step : {100, 200}) ASSERT_TRUE(store->Write(Step(step)).ok());
  ASSERT_EQ(::unlink((dir + "/run").c_str()), 0);
  ASSERT_EQ(::mkdir((dir + "/run").c_str(), 0700), 0);  // read() fails: EISDIR
  Status s = store->ClaimForRun("run-a", false, &removed);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(dir + "/run"));
  EXPECT_EQ(removed, 0u);
  EXPECT_THAT(StepsOf(*store), ElementsAre(100, 200));
}

// Holds every file descriptor the process may still open, so that the next
// open() fails (EMFILE): a server under load. As root, permissions cannot
// make a file unreadable, and an I/O error or a stale network mount fails
// the same way.
class NoFreeDescriptors {
 public:
  NoFreeDescriptors() {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit lowered = saved_;
    lowered.rlim_cur = 512;  // the loop below stays short
    ::setrlimit(RLIMIT_NOFILE, &lowered);
    for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) held_.push_back(fd);
  }
  ~NoFreeDescriptors() {
    for (int fd : held_) ::close(fd);
    ::setrlimit(RLIMIT_NOFILE, &saved_);
  }

 private:
  rlimit saved_{};
  std::vector<int> held_;
};

// A checkpoint that could not be opened was taken for a damaged one and
// renamed aside: a good checkpoint lost to a passing shortage. And a folder
// that could not be listed was taken for an empty one: the restarted server
// started fresh.
TEST(CheckpointStoreTest, WhatCannotBeReadNowIsAnErrorNotDamageNorNoCheckpoint) {
  std::unique_ptr<CheckpointStore> store;
  const std::string dir = TempDir();
  ASSERT_TRUE(CheckpointStore::Open(dir, &store).ok());
  for (uint64_t step : {100, 200}) ASSERT_TRUE(store->Write(Step(step)).ok());
  Status latest, one, aside;
  bool found = true;
  {
    NoFreeDescriptors none;
    v1::ShardCheckpoint loaded;
    std::string skipped;
    latest = store->ReadLatest(&loaded, &found, &skipped);
    one = store->Read(200, &loaded);
  }
  EXPECT_FALSE(latest.ok()) << "taken for a folder without checkpoints";
  EXPECT_THAT(latest.message(), HasSubstr("Too many open files"));
  EXPECT_FALSE(found);
  EXPECT_FALSE(one.ok());
  EXPECT_THAT(one.message(), HasSubstr("Too many open files"));
  EXPECT_THAT(one.message(), Not(HasSubstr("damaged")));
  EXPECT_THAT(StepsOf(*store), ElementsAre(100, 200)) << "nothing was renamed aside";
}

}  // namespace
}  // namespace kubeps
