#include "tools/checkpoint_reshard.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "common/stop_token.h"
#include "ps-server/checkpoint_folder_lock.h"
#include "ps-server/checkpoint_store.h"

namespace kubeps::tools {
namespace {

namespace fs = std::filesystem;

// Tensors sliced over the servers (the first and third), small ones placed
// whole, and a bias following its weight.
const std::vector<uint64_t> kSizes = {3000, 10, 5000, 7, 1200};

PlacementOptions SmallBound() {
  PlacementOptions options;
  options.big_array_bound = 1000;
  options.max_part_elems = 700;  // pieces of pieces, as 2 MiB cuts a big tensor
  return options;
}

// Element `i` of tensor `key`, as the value (slot 0) or an optimizer slot.
float Element(uint32_t key, uint64_t i, int slot) {
  return static_cast<float>(key) * 10000.0f + static_cast<float>(i) + 0.25f * slot;
}

std::string Floats(uint32_t key, uint64_t offset, uint64_t length, int slot) {
  std::string bytes(length * sizeof(float), '\0');
  auto* f = reinterpret_cast<float*>(bytes.data());
  for (uint64_t i = 0; i < length; ++i) f[i] = Element(key, offset + i, slot);
  return bytes;
}

// The checkpoints of step 40 that `servers` servers write under `placement`.
std::vector<v1::ShardCheckpoint> Written(int servers, const PlacementOptions& placement) {
  std::vector<v1::ShardCheckpoint> written(static_cast<size_t>(servers));
  for (auto& c : written) {
    c.set_step(40);
    c.set_server_count(static_cast<uint32_t>(servers));
    c.set_optimizer("adam");
    c.set_mode("sync");
    c.set_global_batch(64);
    auto* sender = c.add_senders();
    sender->set_node_id("worker-0");
  }
  for (const Part& part : PlaceTensors(kSizes, servers, placement)) {
    auto* p = written[static_cast<size_t>(part.server)].add_parts();
    p->set_key(part.key);
    p->set_offset(part.offset);
    p->set_version(40);
    p->set_optimizer_steps(39);
    p->set_name("t" + std::to_string(part.key));
    p->set_value(Floats(part.key, part.offset, part.length, 0));
    p->set_slot1(Floats(part.key, part.offset, part.length, 1));
    p->set_slot2(Floats(part.key, part.offset, part.length, 2));
  }
  return written;
}

// Every element of every part is the one its key and offset name.
void ExpectTheSameNumbers(const std::vector<v1::ShardCheckpoint>& checkpoints) {
  uint64_t elements = 0;
  for (const auto& c : checkpoints) {
    for (const auto& p : c.parts()) {
      const uint64_t length = p.value().size() / sizeof(float);
      EXPECT_EQ(p.value(), Floats(p.key(), p.offset(), length, 0)) << p.key() << "@" << p.offset();
      EXPECT_EQ(p.slot1(), Floats(p.key(), p.offset(), length, 1));
      EXPECT_EQ(p.slot2(), Floats(p.key(), p.offset(), length, 2));
      EXPECT_EQ(p.optimizer_steps(), 39u);
      EXPECT_EQ(p.name(), "t" + std::to_string(p.key()));
      elements += length;
    }
  }
  uint64_t total = 0;
  for (uint64_t size : kSizes) total += size;
  EXPECT_EQ(elements, total);
}

TEST(CheckpointReshardTest,
     TwoServersCutForThreeAndForOneHoldTheSameNumbersWherePlacementPutsThem) {
  const auto two = Written(2, SmallBound());
  for (int servers : {3, 1}) {
    std::vector<v1::ShardCheckpoint> resharded;
    ASSERT_TRUE(ReshardCheckpoints(two, servers, SmallBound(), &resharded).ok());
    ASSERT_EQ(resharded.size(), static_cast<size_t>(servers));
    EXPECT_TRUE(PlacedAsBy(resharded, servers, SmallBound()));
    EXPECT_FALSE(PlacedAsBy(two, servers, SmallBound()));
    ExpectTheSameNumbers(resharded);
    for (const auto& c : resharded) {
      EXPECT_EQ(c.step(), 40u);
      EXPECT_EQ(c.server_count(), static_cast<uint32_t>(servers));
      EXPECT_EQ(c.optimizer(), "adam");
      EXPECT_EQ(c.global_batch(), 64u);
      EXPECT_EQ(c.senders_size(), 0);  // the run that resumes has new senders
    }
    // And back: the very checkpoints two servers wrote.
    std::vector<v1::ShardCheckpoint> back;
    ASSERT_TRUE(ReshardCheckpoints(resharded, 2, SmallBound(), &back).ok());
    for (size_t s = 0; s < 2; ++s) {
      ASSERT_EQ(back[s].parts_size(), two[s].parts_size());
      for (int i = 0; i < two[s].parts_size(); ++i)
        EXPECT_EQ(back[s].parts(i).SerializeAsString(), two[s].parts(i).SerializeAsString());
    }
  }
}

TEST(CheckpointReshardTest, AnotherBigArrayBoundCutsTheSameServersTensorsOtherwise) {
  const auto sliced = Written(2, SmallBound());
  PlacementOptions whole = SmallBound();
  whole.big_array_bound = 1000000;
  EXPECT_TRUE(PlacedAsBy(sliced, 2, SmallBound()));
  EXPECT_FALSE(PlacedAsBy(sliced, 2, whole));
  std::vector<v1::ShardCheckpoint> resharded;
  ASSERT_TRUE(ReshardCheckpoints(sliced, 2, whole, &resharded).ok());
  EXPECT_TRUE(PlacedAsBy(resharded, 2, whole));
  ExpectTheSameNumbers(resharded);
}

TEST(CheckpointReshardTest, AMissingPieceOrAnotherStepIsRefusedNamingIt) {
  // The start of server-1's slice of tensor 0: a gap after server-0's.
  // (A tensor's last piece missing cannot be seen here: the job resumed
  // from them refuses its model as another.)
  auto missing = Written(2, SmallBound());
  auto* parts = missing[1].mutable_parts();
  ASSERT_EQ(parts->Get(0).key(), 0u);
  ASSERT_GT(parts->Get(0).offset(), 0u);
  parts->erase(parts->begin());
  std::vector<v1::ShardCheckpoint> out;
  Status s = ReshardCheckpoints(missing, 3, SmallBound(), &out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tensor 0 (t0): elements 1500 to 2000 are in no server's checkpoint"),
            std::string::npos)
      << s.message();

  auto other_step = Written(2, SmallBound());
  other_step[1].set_step(20);
  s = ReshardCheckpoints(other_step, 3, SmallBound(), &out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("server-1 is of step 20"), std::string::npos) << s.message();
}

// An async shard checkpoints between two requests of one push, a sync step
// skipped for a non-finite gradient (nonFinite: SkipStep) skips one
// request's parts: a tensor's pieces may count other updates.
TEST(CheckpointReshardTest, PiecesUpdatedADifferentNumberOfTimesGoOnWithTheMostAndSaySo) {
  auto mixed = Written(2, SmallBound());
  mixed[1].mutable_parts(0)->set_optimizer_steps(38);
  mixed[1].mutable_parts(0)->set_version(39);
  std::vector<v1::ShardCheckpoint> out;
  std::vector<std::string> notes;
  ASSERT_TRUE(ReshardCheckpoints(mixed, 3, SmallBound(), &out, &notes).ok());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0],
            "tensor 0 (t0): its pieces were updated 39 and 38 times; it goes on "
            "counting the most");
  for (const auto& c : out) {
    for (const auto& p : c.parts()) {
      EXPECT_EQ(p.optimizer_steps(), 39u);
      EXPECT_EQ(p.version(), 40u);
    }
  }
}

// Placement gives a tensor of no elements no part: no piece names its key.
TEST(CheckpointReshardTest, AKeyNoPieceNamesIsATensorOfNoElements) {
  auto two = Written(2, SmallBound());
  for (auto& c : two)
    for (auto& p : *c.mutable_parts())
      if (p.key() >= 1) p.set_key(p.key() + 1);  // key 1: no elements
  std::vector<v1::ShardCheckpoint> out;
  ASSERT_TRUE(ReshardCheckpoints(two, 3, SmallBound(), &out).ok());
  std::set<uint32_t> keys;
  for (const auto& c : out)
    for (const auto& p : c.parts()) keys.insert(p.key());
  EXPECT_EQ(keys, (std::set<uint32_t>{0, 2, 3, 4, 5}));
}

TEST(CheckpointReshardTest, AnAsyncWorkersStepIsTheMostAnyShardApplied) {
  auto two = Written(2, SmallBound());
  (*two[0].mutable_async_worker_steps()->mutable_next_step())[0] = 30;
  (*two[1].mutable_async_worker_steps()->mutable_next_step())[0] = 31;
  (*two[1].mutable_async_worker_steps()->mutable_next_step())[1] = 12;
  std::vector<v1::ShardCheckpoint> out;
  ASSERT_TRUE(ReshardCheckpoints(two, 3, SmallBound(), &out).ok());
  for (const auto& c : out) {
    EXPECT_EQ(c.async_worker_steps().next_step().at(0), 31u);
    EXPECT_EQ(c.async_worker_steps().next_step().at(1), 12u);
  }
  two[0].clear_async_worker_steps();  // one shard did not keep them: unknown
  ASSERT_TRUE(ReshardCheckpoints(two, 3, SmallBound(), &out).ok());
  EXPECT_FALSE(out[0].has_async_worker_steps());
}

class ReshardFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/kubeps-reshard-XXXXXX";
    ASSERT_NE(::mkdtemp(name), nullptr);
    folder_ = name;
  }
  void TearDown() override { fs::remove_all(folder_); }

  // Server `s`'s folder with the checkpoints of `steps`.
  void WriteServer(int s, const std::vector<v1::ShardCheckpoint>& of_step_40,
                   const std::vector<uint64_t>& steps) {
    std::unique_ptr<CheckpointStore> store;
    ASSERT_TRUE(CheckpointStore::Open(Dir(s), &store).ok());
    for (uint64_t step : steps) {
      v1::ShardCheckpoint c = of_step_40[static_cast<size_t>(s)];
      c.set_step(step);
      ASSERT_TRUE(store->Write(c).ok());
    }
  }
  std::string Dir(int s) const { return folder_ + "/server-" + std::to_string(s); }
  std::vector<v1::ShardCheckpoint> Read(int servers, uint64_t step) const {
    std::vector<v1::ShardCheckpoint> read(static_cast<size_t>(servers));
    for (int s = 0; s < servers; ++s) {
      std::unique_ptr<CheckpointStore> store;
      EXPECT_TRUE(CheckpointStore::Open(Dir(s), &store).ok());
      EXPECT_TRUE(store->Read(step, &read[static_cast<size_t>(s)]).ok()) << Dir(s);
    }
    return read;
  }
  std::string folder_;
};

TEST_F(ReshardFolderTest, TheNewestCommonStepIsReshardedAndTheOldFoldersMovedAside) {
  const auto two = Written(2, SmallBound());
  WriteServer(0, two, {20, 40, 60});
  WriteServer(1, two, {20, 40});  // server-1 died before its step 60
  ReshardReport report;
  Status s = ReshardFolder(folder_, 3, SmallBound(), &report);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(report.step, 40u);
  EXPECT_EQ(report.old_servers, 2);
  EXPECT_EQ(report.tensors, kSizes.size());
  EXPECT_EQ(report.moved_aside, folder_ + "/before-reshard-2-servers-step-40");
  const auto three = Read(3, 40);
  EXPECT_TRUE(PlacedAsBy(three, 3, SmallBound()));
  ExpectTheSameNumbers(three);
  for (int s = 0; s < 3; ++s) {
    std::unique_ptr<CheckpointStore> store;
    ASSERT_TRUE(CheckpointStore::Open(Dir(s), &store).ok());
    std::vector<uint64_t> steps;
    ASSERT_TRUE(store->Steps(&steps).ok());
    EXPECT_EQ(steps, std::vector<uint64_t>{40});
  }
  EXPECT_TRUE(fs::exists(report.moved_aside + "/server-0/step-00000000000000000060.ckpt"));
  EXPECT_FALSE(fs::exists(folder_ + "/.reshard-step-40"));

  // Resharded for 3 already: nothing moves.
  ASSERT_TRUE(ReshardFolder(folder_, 3, SmallBound(), &report).ok());
  EXPECT_EQ(report.moved_aside, "");
}

// A run with 3 servers over 2 servers' checkpoints fails at once, leaving
// an empty server-2: the old servers are those holding checkpoints, and
// every server folder is moved aside. The new ones keep the run mark.
TEST_F(ReshardFolderTest, TheEmptyFolderOfARunThatFailedIsMovedAsideToo) {
  const auto two = Written(2, SmallBound());
  WriteServer(0, two, {40});
  WriteServer(1, two, {40});
  for (int s = 0; s < 2; ++s) {
    std::ofstream(Dir(s) + "/run") << "run-1\n";
  }
  fs::create_directories(Dir(2));
  std::ofstream(Dir(2) + "/owner.lock");
  ReshardReport report;
  Status s = ReshardFolder(folder_, 3, SmallBound(), &report);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(report.old_servers, 2);
  EXPECT_TRUE(fs::exists(report.moved_aside + "/server-2/owner.lock"));
  const auto three = Read(3, 40);
  EXPECT_TRUE(PlacedAsBy(three, 3, SmallBound()));
  for (int s = 0; s < 3; ++s) {
    std::ifstream run(Dir(s) + "/run");
    std::string line;
    std::getline(run, line);
    EXPECT_EQ(line, "run-1") << Dir(s);
  }
}

// A damaged newest step sends it to the one before, as a recovery would.
TEST_F(ReshardFolderTest, ADamagedNewestStepTakesTheOneBefore) {
  const auto two = Written(2, SmallBound());
  WriteServer(0, two, {20, 40});
  WriteServer(1, two, {20, 40});
  std::ofstream(Dir(1) + "/step-00000000000000000040.ckpt", std::ios::trunc) << "not a checkpoint";
  ReshardReport report;
  Status s = ReshardFolder(folder_, 3, SmallBound(), &report);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(report.step, 20u);
  ASSERT_EQ(report.notes.size(), 1u);
  EXPECT_NE(report.notes[0].find("the step before is taken"), std::string::npos);
}

TEST_F(ReshardFolderTest, AFolderAServerHoldsIsLeftAsItWas) {
  const auto two = Written(2, SmallBound());
  WriteServer(0, two, {40});
  WriteServer(1, two, {40});
  std::unique_ptr<CheckpointStore> running;
  ASSERT_TRUE(CheckpointStore::Open(Dir(1), &running).ok());
  StopToken stop;
  ASSERT_TRUE(running
                  ->Hold(FolderHolder::ThisProcess("run-1", "default/job", "server-1"), &stop,
                         FolderLockWait{})
                  .ok());
  ReshardReport report;
  Status s = ReshardFolder(folder_, 3, SmallBound(), &report);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(Dir(1) + " is in use"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(Dir(2)));
  EXPECT_EQ(Read(2, 40)[1].parts_size(), two[1].parts_size());
}

// A reshard killed between two of its moves (its pod evicted, the node
// rebooted) leaves old and new server folders side by side, and its journal:
// a server refuses the folder, and the next reshard finishes the moves, to
// the folders a reshard that was not killed leaves.
TEST_F(ReshardFolderTest, AReshardKilledBetweenItsMovesIsFinishedByTheNext) {
  const auto two = Written(2, SmallBound());
  const std::string journal = folder_ + "/" + kReshardJournal;
  for (int killed_after = 1; killed_after <= 4; ++killed_after) {  // 2 moves aside, 3 in
    SCOPED_TRACE("killed after move " + std::to_string(killed_after));
    fs::remove_all(folder_);
    WriteServer(0, two, {40});
    WriteServer(1, two, {40});
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      int made = 0;
      ReshardReport report;
      Status ignored = ReshardFolder(folder_, 3, SmallBound(), &report, [&] {
        if (++made == killed_after) ::_exit(0);
      });
      ::_exit(1);  // every move was made
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ASSERT_TRUE(fs::exists(journal));
    for (int s = 0; s < 3; ++s) {
      const Status refused = RefuseHalfResharded(Dir(s));
      EXPECT_EQ(refused.code(), Status::Code::kFailedPrecondition);
      EXPECT_EQ(refused.reason(), "CheckpointMismatch");
      EXPECT_NE(refused.message().find("run kubeps reshard on it again"), std::string::npos)
          << refused.message();
    }

    ReshardReport report;
    Status s = ReshardFolder(folder_, 3, SmallBound(), &report);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_FALSE(fs::exists(journal));
    EXPECT_TRUE(RefuseHalfResharded(Dir(0)).ok());
    EXPECT_EQ(report.old_servers, 2);
    EXPECT_EQ(report.moved_aside, folder_ + "/before-reshard-2-servers-step-40");
    ASSERT_FALSE(report.notes.empty());
    EXPECT_EQ(report.notes[0],
              "finished the reshard of step 40 for 3 servers that was stopped between its moves");
    const auto three = Read(3, 40);
    EXPECT_TRUE(PlacedAsBy(three, 3, SmallBound()));
    ExpectTheSameNumbers(three);
    for (int s = 0; s < 2; ++s) {
      EXPECT_TRUE(fs::exists(report.moved_aside + "/server-" + std::to_string(s) +
                             "/step-00000000000000000040.ckpt"));
    }
    EXPECT_FALSE(fs::exists(Dir(3)));
    EXPECT_FALSE(fs::exists(folder_ + "/.reshard-step-40"));
  }
}

TEST_F(ReshardFolderTest, NoServerFoldersOrNoCommonStepIsSaid) {
  ReshardReport report;
  Status s = ReshardFolder(folder_, 3, SmallBound(), &report);
  EXPECT_NE(s.message().find("no checkpoints in " + folder_), std::string::npos) << s.message();
  const auto two = Written(2, SmallBound());
  WriteServer(0, two, {20});
  WriteServer(1, two, {40});
  s = ReshardFolder(folder_, 3, SmallBound(), &report);
  EXPECT_NE(s.message().find("no checkpoint step in common"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(Dir(2)));
}

}  // namespace
}  // namespace kubeps::tools
