// One live process per checkpoint folder (ps-server/checkpoint_folder_lock.h):
// another run's holder (another job's, or an earlier run of this job's) is
// given a grace, then is an error that names the folder and the holder; an
// earlier process of this run is waited for until it lets go, or until a
// stop; a holder that has not said who it is yet is waited for too;
// and the kernel lets go of a killed holder's lock.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ps-server/checkpoint_folder_lock.h"

namespace kubeps {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

constexpr milliseconds kPoll{10};
// Another run's holder fails a starting server at once in most tests.
const FolderLockWait kNoGrace{kPoll, std::chrono::seconds(0)};

std::string TempDir() {
  std::string pattern = std::filesystem::temp_directory_path() / "kubeps-folder-lock-XXXXXX";
  return ::mkdtemp(pattern.data());
}

FolderHolder Holder(const std::string& job, const std::string& run, const std::string& host) {
  FolderHolder holder = FolderHolder::ThisProcess(run, "default/" + job, "server-0");
  holder.host = host;
  return holder;
}

std::string OwnerFile(const std::string& dir) {
  std::ifstream in(dir + "/owner");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A holder that lets go `after` from now, as a process that exits would.
std::thread LetGoAfter(milliseconds after, std::unique_ptr<CheckpointFolderLock>* lock) {
  return std::thread([after, lock] {
    std::this_thread::sleep_for(after);
    lock->reset();
  });
}

class CheckpointFolderLockTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = TempDir(); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
  StopToken stop_;
};

TEST_F(CheckpointFolderLockTest, AnotherJobsHolderIsAnErrorNamingTheFolderAndTheHolder) {
  std::unique_ptr<CheckpointFolderLock> first, second;
  ASSERT_TRUE(
      CheckpointFolderLock::Take(dir_, Holder("first", "run-a", "node-1"), &stop_, kNoGrace, &first)
          .ok());
  EXPECT_TRUE(first->locked());
  Status s = CheckpointFolderLock::Take(dir_, Holder("second", "run-b", "node-2"), &stop_, kNoGrace,
                                        &second);
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("checkpoint folder " + dir_ +
                                     " is in use by server-0 of job default/first (run run-a) on "
                                     "node-1, pid " +
                                     std::to_string(::getpid())));
  EXPECT_THAT(s.message(), HasSubstr("two jobs must not share a spec.checkpoint.path"));
  EXPECT_EQ(second, nullptr);
  // The holder's word stays as it wrote it.
  EXPECT_EQ(FolderHolder::Parse(OwnerFile(dir_)).host, "node-1");
}

TEST_F(CheckpointFolderLockTest, AnEarlierProcessOfThisRunIsWaitedFor) {
  std::unique_ptr<CheckpointFolderLock> first, second;
  ASSERT_TRUE(CheckpointFolderLock::Take(dir_, Holder("first", "run-a", "old-node"), &stop_,
                                         kNoGrace, &first)
                  .ok());
  const auto start = std::chrono::steady_clock::now();
  std::thread release = LetGoAfter(milliseconds(300), &first);
  Status s = CheckpointFolderLock::Take(dir_, Holder("first", "run-a", "new-node"), &stop_,
                                        kNoGrace, &second);
  release.join();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(300));
  EXPECT_TRUE(second->locked());
  const FolderHolder now = FolderHolder::Parse(OwnerFile(dir_));
  EXPECT_EQ(now.host, "new-node");
  EXPECT_EQ(now.run_id, "run-a");
  EXPECT_EQ(now.job, "default/first");
  EXPECT_EQ(now.replica, "server-0");
  EXPECT_EQ(now.pid, static_cast<long>(::getpid()));
  EXPECT_FALSE(now.since.empty());
}

TEST_F(CheckpointFolderLockTest, TheWaitIsReportedAtEveryTryAsItGrows) {
  std::unique_ptr<CheckpointFolderLock> first, second;
  ASSERT_TRUE(CheckpointFolderLock::Take(dir_, Holder("first", "run-a", "old-node"), &stop_,
                                         kNoGrace, &first)
                  .ok());
  std::vector<milliseconds> reported;
  FolderLockWait waiting = kNoGrace;
  waiting.on_wait = [&reported](milliseconds waited) { reported.push_back(waited); };
  std::thread release = LetGoAfter(milliseconds(300), &first);
  Status s = CheckpointFolderLock::Take(dir_, Holder("first", "run-a", "new-node"), &stop_, waiting,
                                        &second);
  release.join();
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_GE(reported.size(), 3u);  // every 10 ms for 300
  EXPECT_TRUE(std::is_sorted(reported.begin(), reported.end()));
  EXPECT_GE(reported.back(), milliseconds(200));
  EXPECT_LE(reported.back(), milliseconds(300) + milliseconds(5000));  // a slow machine's
  // A free folder is taken without a word.
  reported.clear();
  second.reset();
  ASSERT_TRUE(
      CheckpointFolderLock::Take(dir_, Holder("first", "run-a", "node"), &stop_, waiting, &first)
          .ok());
  EXPECT_TRUE(reported.empty());
}

// The job deleted and created again (a new UID) while its old server still
// stops: given the grace, as another job's would be; past it, the error says
// whose run it is.
TEST_F(CheckpointFolderLockTest, AnEarlierRunOfThisJobIsGivenTheGrace) {
  const FolderLockWait grace{kPoll, std::chrono::seconds(5)};
  std::unique_ptr<CheckpointFolderLock> first, second;
  ASSERT_TRUE(
      CheckpointFolderLock::Take(dir_, Holder("first", "run-a", "old-node"), &stop_, grace, &first)
          .ok());
  Status s = CheckpointFolderLock::Take(dir_, Holder("first", "run-b", "new-node"), &stop_,
                                        kNoGrace, &second);
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("an earlier run of this job (a deleted job's pod may still be "
                                     "stopping; run this job again once it is gone)"));
  std::thread release = LetGoAfter(milliseconds(200), &first);
  s = CheckpointFolderLock::Take(dir_, Holder("first", "run-b", "new-node"), &stop_, grace,
                                 &second);
  release.join();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(FolderHolder::Parse(OwnerFile(dir_)).run_id, "run-b");
}

TEST_F(CheckpointFolderLockTest, AStopEndsTheWait) {
  std::unique_ptr<CheckpointFolderLock> first, second;
  ASSERT_TRUE(CheckpointFolderLock::Take(dir_, Holder("first", "run-a", "old-node"), &stop_,
                                         kNoGrace, &first)
                  .ok());
  StopToken stop;
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(100));
    stop.RequestStop();
  });
  Status s = CheckpointFolderLock::Take(dir_, Holder("first", "run-a", "new-node"), &stop, kNoGrace,
                                        &second);
  stopper.join();
  EXPECT_TRUE(s.IsAborted()) << s.message();
  EXPECT_THAT(s.message(), HasSubstr(dir_));
  EXPECT_EQ(second, nullptr);
}

// A holder whose record is not all there (none yet, or cut short: no end
// mark) is waited for, even with no grace for another job's.
TEST_F(CheckpointFolderLockTest, AHolderWhoseRecordIsNotCompleteIsWaitedFor) {
  const int fd = ::open((dir_ + "/owner.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  std::string cut = Holder("other", "run-x", "node-9").Serialize();
  cut.resize(cut.size() - 2);  // "...\nen"
  std::ofstream(dir_ + "/owner") << cut;
  std::thread release([&] {
    std::this_thread::sleep_for(milliseconds(200));
    ::close(fd);
  });
  std::unique_ptr<CheckpointFolderLock> lock;
  Status s = CheckpointFolderLock::Take(dir_, Holder("second", "run-b", "node-2"), &stop_, kNoGrace,
                                        &lock);
  release.join();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(FolderHolder::Parse(OwnerFile(dir_)).run_id, "run-b");
}

TEST_F(CheckpointFolderLockTest, ARecordIsCompleteOnlyWithEveryFieldAndItsEndMark) {
  const std::string whole = Holder("first", "run-a", "node-1").Serialize();
  const FolderHolder parsed = FolderHolder::Parse(whole);
  EXPECT_TRUE(parsed.complete);
  EXPECT_EQ(parsed.job, "default/first");
  EXPECT_EQ(parsed.node, "");
  const FolderHolder on_a_node = FolderHolder::Parse(
      FolderHolder::ThisProcess("r", "default/first", "server-0", "node-3").Serialize());
  EXPECT_TRUE(on_a_node.complete);
  EXPECT_EQ(on_a_node.node, "node-3");
  EXPECT_THAT(on_a_node.Describe(), HasSubstr(" (node node-3), pid "));
  EXPECT_NE(parsed.nonce, 0u);
  EXPECT_FALSE(FolderHolder::Parse(whole.substr(0, whole.size() - 1)).complete);   // "end"
  EXPECT_FALSE(FolderHolder::Parse(whole.substr(whole.find('\n') + 1)).complete);  // no run
  EXPECT_FALSE(FolderHolder::Parse("").complete);
  std::string twice = whole;  // run twice, nonce never: not a record this code wrote
  twice.replace(twice.find("nonce"), 5, "run");
  EXPECT_FALSE(FolderHolder::Parse(twice).complete);
}

// A deleted job's pod may still be stopping: another job's holder is given
// the grace before the error.
TEST_F(CheckpointFolderLockTest, AnotherJobsHolderIsGivenTheGraceFirst) {
  const FolderLockWait grace{kPoll, std::chrono::seconds(1)};
  std::unique_ptr<CheckpointFolderLock> first, second;
  ASSERT_TRUE(
      CheckpointFolderLock::Take(dir_, Holder("first", "run-a", "node-1"), &stop_, grace, &first)
          .ok());
  auto start = std::chrono::steady_clock::now();
  Status s =
      CheckpointFolderLock::Take(dir_, Holder("second", "run-b", "node-2"), &stop_, grace, &second);
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.message();
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  // Stopped within the grace: the folder is the new job's.
  std::thread release = LetGoAfter(milliseconds(300), &first);
  s = CheckpointFolderLock::Take(dir_, Holder("second", "run-b", "node-2"), &stop_, grace, &second);
  release.join();
  EXPECT_TRUE(s.ok()) << s.message();
}

// Where the lock did not exclude (a lease that lapsed while the holder was
// cut off; a file system that locks on one node only), a successor's record
// tells the old holder it was taken over.
TEST_F(CheckpointFolderLockTest, ASuccessorsRecordSaysTheFolderWasTakenOver) {
  std::unique_ptr<CheckpointFolderLock> old_holder;
  ASSERT_TRUE(CheckpointFolderLock::Take(dir_, Holder("first", "run-a", "old-node"), &stop_,
                                         kNoGrace, &old_holder)
                  .ok());
  EXPECT_TRUE(old_holder->CheckStillOurs().ok());
  std::ofstream(dir_ + "/owner") << Holder("first", "run-a", "new-node").Serialize();
  Status s = old_holder->CheckStillOurs();
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("checkpoint folder " + dir_ +
                                     " was taken over by server-0 of job default/first (run "
                                     "run-a) on new-node"));
}

TEST_F(CheckpointFolderLockTest, AKilledHoldersLockIsFree) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    StopToken stop;
    std::unique_ptr<CheckpointFolderLock> lock;
    const bool took =
        CheckpointFolderLock::Take(dir_, Holder("first", "run-a", "node-1"), &stop, kNoGrace, &lock)
            .ok();
    const char byte = took ? '1' : '0';
    (void)::write(ready[1], &byte, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(byte, '1');
  std::unique_ptr<CheckpointFolderLock> lock;
  Status held = CheckpointFolderLock::Take(dir_, Holder("second", "run-b", "node-2"), &stop_,
                                           kNoGrace, &lock);
  EXPECT_EQ(held.code(), Status::Code::kAlreadyExists) << held.message();
  EXPECT_THAT(held.message(), HasSubstr("pid " + std::to_string(child)));
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  Status s = CheckpointFolderLock::Take(dir_, Holder("second", "run-b", "node-2"), &stop_, kNoGrace,
                                        &lock);
  EXPECT_TRUE(s.ok()) << s.message();
}

}  // namespace
}  // namespace kubeps
