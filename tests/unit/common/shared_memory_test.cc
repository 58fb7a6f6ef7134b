#include "common/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace kubeps {
namespace {

bool Exists(const std::string& name) { return ::access(("/dev/shm/" + name).c_str(), F_OK) == 0; }

TEST(SharedSegmentTest, AServerMapsTheWorkersBytesAndTheWorkerDeletesItsFile) {
  std::unique_ptr<SharedSegment> worker;
  ASSERT_TRUE(SharedSegment::Create("worker/0 of job", 1000, &worker).ok());
  EXPECT_EQ(worker->name().rfind("kubeps-worker-0-of-job-" + std::to_string(::getpid()) + "-", 0),
            0u)
      << worker->name();
  EXPECT_GE(worker->size(), SharedSegment::FirstRegion() + 1000);
  std::strcpy(worker->base() + SharedSegment::FirstRegion(), "gradients");

  std::unique_ptr<SharedSegment> server;
  ASSERT_TRUE(SharedSegment::Attach(worker->name(), worker->nonce(), &server).ok());
  EXPECT_STREQ(server->base() + SharedSegment::FirstRegion(), "gradients");
  std::strcpy(server->base() + SharedSegment::FirstRegion() + 100, "values");
  EXPECT_STREQ(worker->base() + SharedSegment::FirstRegion() + 100, "values");

  const std::string name = worker->name();
  const uint64_t nonce = worker->nonce();
  server.reset();  // the server's mapping never deletes the file
  EXPECT_TRUE(Exists(name));
  worker.reset();
  EXPECT_FALSE(Exists(name));
  const Status gone = SharedSegment::Attach(name, nonce, &server);
  EXPECT_EQ(gone.code(), Status::Code::kGone);
  EXPECT_NE(gone.message().find("cannot open /dev/shm/" + name), std::string::npos)
      << gone.message();
}

TEST(SharedSegmentTest, AnotherNonceOrANameOutsideKubepsIsRefused) {
  std::unique_ptr<SharedSegment> worker, server;
  ASSERT_TRUE(SharedSegment::Create("w", 64, &worker).ok());
  Status s = SharedSegment::Attach(worker->name(), worker->nonce() + 1, &server);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("another nonce"), std::string::npos) << s.message();
  for (const std::string name : {"../../etc/passwd", "kubeps-../x", "other-segment", ""}) {
    s = SharedSegment::Attach(name, worker->nonce(), &server);
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_NE(s.message().find("is not a kubeps segment's name"), std::string::npos) << s.message();
  }
}

TEST(SharedSegmentTest, HoldsOnlyRangesAfterTheHeaderAndInside) {
  std::unique_ptr<SharedSegment> segment;
  ASSERT_TRUE(SharedSegment::Create("w", 128, &segment).ok());
  const uint64_t first = SharedSegment::FirstRegion(), size = segment->size();
  EXPECT_TRUE(segment->Holds(first, size - first));
  EXPECT_FALSE(segment->Holds(first - 1, 1));  // the header
  EXPECT_FALSE(segment->Holds(first, size - first + 1));
  EXPECT_FALSE(segment->Holds(size + 64, 0));
  EXPECT_FALSE(segment->Holds(first + 8, UINT64_MAX));  // no overflow
}

TEST(SharedSegmentTest, CreateDeletesWhatADeadProcessLeftButNotALiveOnesFile) {
  // A file no process holds a lock on, sized: what a killed worker leaves.
  const std::string left = "kubeps-leftover-1-0000000000000000";
  const int fd = ::shm_open(left.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  ::close(fd);
  std::unique_ptr<SharedSegment> live, next;
  ASSERT_TRUE(SharedSegment::Create("live", 64, &live).ok());
  EXPECT_FALSE(Exists(left));
  ASSERT_TRUE(SharedSegment::Create("next", 64, &next).ok());
  EXPECT_TRUE(Exists(live->name()));
}

// A worker creates its file, then locks it: in between, the file is empty
// and unlocked. A worker starting beside it at that moment must not take it
// for a leftover (its servers could not map it, and the job's tensors would
// go over TCP). An empty file a minute old is a leftover.
TEST(SharedSegmentTest, AnEmptyFileJustCreatedIsNotTakenForALeftover) {
  const std::string creating = "kubeps-creating-2-0000000000000000";
  const int fd = ::shm_open(creating.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  std::unique_ptr<SharedSegment> beside, later;
  ASSERT_TRUE(SharedSegment::Create("beside", 64, &beside).ok());
  EXPECT_TRUE(Exists(creating)) << "a file being created was deleted";
  const timespec two_minutes_ago[2] = {{::time(nullptr) - 120, 0}, {::time(nullptr) - 120, 0}};
  ASSERT_EQ(::futimens(fd, two_minutes_ago), 0);
  ::close(fd);
  ASSERT_TRUE(SharedSegment::Create("later", 64, &later).ok());
  EXPECT_FALSE(Exists(creating)) << "an empty file left for two minutes was kept";
}

// The pull ticket: a late answer to an old pull never lands over a newer one.
TEST(LandingTest, OnlyTheCurrentPullIsWrittenAndOnlyOnce) {
  LandingHeader header;
  landing::Init(&header);
  landing::Open(&header, 1);
  uint64_t version = 0;
  EXPECT_FALSE(landing::Landed(&header, 1, &version));
  ASSERT_EQ(landing::Begin(&header, 1), landing::Claim::kWrite);
  landing::Done(&header, 7);
  ASSERT_TRUE(landing::Landed(&header, 1, &version));
  EXPECT_EQ(version, 7u);
  // A duplicate of the same pull finds it written.
  EXPECT_EQ(landing::Begin(&header, 1), landing::Claim::kWrittenToo);

  landing::Open(&header, 2);
  EXPECT_FALSE(landing::Landed(&header, 1, &version));
  // A delayed handling of pull 1 arrives after the worker moved on.
  EXPECT_EQ(landing::Begin(&header, 1), landing::Claim::kSuperseded);
  EXPECT_FALSE(landing::Landed(&header, 2, &version));
  ASSERT_EQ(landing::Begin(&header, 2), landing::Claim::kWrite);
  landing::Done(&header, 8);
  ASSERT_TRUE(landing::Landed(&header, 2, &version));
  EXPECT_EQ(version, 8u);
}

TEST(LandingTest, OpenWaitsForAWriterStillAtWork) {
  LandingHeader header;
  landing::Init(&header);
  landing::Open(&header, 1);
  ASSERT_EQ(landing::Begin(&header, 1), landing::Claim::kWrite);
  std::atomic<bool> opened{false};
  std::thread worker([&] {
    landing::Open(&header, 2);
    opened = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(opened);  // the server is still copying pull 1's values
  landing::Done(&header, 1);
  worker.join();
  EXPECT_TRUE(opened);
  EXPECT_EQ(landing::Begin(&header, 2), landing::Claim::kWrite);
}

// A server killed while it wrote a pull's values (its pod evicted, kubeps
// run's restart): the worker's next pull, and the restarted server's
// handling of the same pull, must not wait for it forever.
TEST(LandingTest, AWriterThatDiedHoldsNothingUp) {
  std::unique_ptr<SharedSegment> segment;
  ASSERT_TRUE(SharedSegment::Create("w", sizeof(LandingHeader), &segment).ok());
  auto* header = reinterpret_cast<LandingHeader*>(segment->base() + SharedSegment::FirstRegion());
  landing::Init(header);
  landing::Open(header, 1);
  const pid_t server = ::fork();
  if (server == 0) {  // claims the region, then dies before Done
    ::_exit(landing::Begin(header, 1) == landing::Claim::kWrite ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(server, &status, 0), server);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  // The restarted server, handling a resend of pull 1, writes it.
  auto restarted = std::async(std::launch::async, [&] { return landing::Begin(header, 1); });
  ASSERT_EQ(restarted.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "a dead writer's claim blocks the region";
  ASSERT_EQ(restarted.get(), landing::Claim::kWrite);
  landing::Done(header, 3);
  uint64_t version = 0;
  EXPECT_TRUE(landing::Landed(header, 1, &version));
  EXPECT_EQ(version, 3u);

  // And where it died for good, the worker's next pull opens the region.
  const pid_t again = ::fork();
  if (again == 0) ::_exit(landing::Begin(header, 1) == landing::Claim::kWrittenToo ? 0 : 1);
  ASSERT_EQ(::waitpid(again, &status, 0), again);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  landing::Open(header, 2);
  const pid_t dying = ::fork();
  if (dying == 0) ::_exit(landing::Begin(header, 2) == landing::Claim::kWrite ? 0 : 1);
  ASSERT_EQ(::waitpid(dying, &status, 0), dying);
  auto opened = std::async(std::launch::async, [&] { landing::Open(header, 3); });
  ASSERT_EQ(opened.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "a dead writer's claim blocks the worker's next pull";
  EXPECT_EQ(landing::Begin(header, 3), landing::Claim::kWrite);
  landing::Done(header, 4);
}

}  // namespace
}  // namespace kubeps
