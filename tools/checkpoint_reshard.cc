#include "tools/checkpoint_reshard.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "common/stop_token.h"
#include "ps-server/checkpoint_folder_lock.h"
#include "ps-server/checkpoint_store.h"
#include "ps-server/durable_file.h"

namespace kubeps::tools {

namespace fs = std::filesystem;

namespace {

using PartState = v1::ShardCheckpoint::PartState;

// One tensor put back together from its pieces on the old servers.
struct WholeTensor {
  uint64_t elements = 0;
  std::string value, slot1, slot2;  // float32 bytes, the whole tensor each (slots may be empty)
  uint64_t version = 0;
  uint64_t optimizer_steps = 0;
  std::string name;
};

std::string DescribeTensor(uint32_t key, const std::string& name) {
  return "tensor " + std::to_string(key) + (name.empty() ? "" : " (" + name + ")");
}

// The header every new checkpoint shares: the old ones' but for what a
// server holds of its own.
Status CommonHeader(const std::vector<v1::ShardCheckpoint>& from, int servers,
                    v1::ShardCheckpoint* header) {
  const v1::ShardCheckpoint& first = from.front();
  for (size_t i = 0; i < from.size(); ++i) {
    const v1::ShardCheckpoint& c = from[i];
    const std::string which = "the checkpoint of server-" + std::to_string(i);
    if (c.step() != first.step())
      return Status::InvalidArgument(which + " is of step " + std::to_string(c.step()) +
                                     ", server-0's of step " + std::to_string(first.step()));
    if (c.server_count() != 0 && c.server_count() != from.size())
      return Status::InvalidArgument(which + " was written by a job of " +
                                     std::to_string(c.server_count()) + " servers, but " +
                                     std::to_string(from.size()) + " folders hold step " +
                                     std::to_string(first.step()));
    if (c.optimizer() != first.optimizer() || c.mode() != first.mode())
      return Status::InvalidArgument(which + " was written with optimizer \"" + c.optimizer() +
                                     "\" in mode \"" + c.mode() + "\", server-0's with \"" +
                                     first.optimizer() + "\" in \"" + first.mode() + "\"");
  }
  *header = first;
  header->clear_parts();
  header->clear_senders();
  header->clear_part_count();
  header->set_server_count(static_cast<uint32_t>(servers));
  // An async worker's step is the most any shard applied of its pushes (as
  // the scheduler reads it), and unknown where one shard did not keep it.
  header->clear_async_worker_steps();
  const bool all_know = std::all_of(from.begin(), from.end(), [](const v1::ShardCheckpoint& c) {
    return c.has_async_worker_steps();
  });
  if (all_know) {
    auto* steps = header->mutable_async_worker_steps()->mutable_next_step();
    for (const auto& c : from)
      for (const auto& [rank, next] : c.async_worker_steps().next_step())
        (*steps)[rank] = std::max((*steps)[rank], next);
  }
  return Status::Ok();
}

// Every tensor, by key, from the pieces the old servers hold. Pieces of one
// tensor updated a different number of times (an async shard checkpoints
// between two requests of one push; a sync step skipped for a non-finite
// gradient in one request, nonFinite: SkipStep) go on with the most: each
// is said in `notes`.
Status PutTogether(const std::vector<v1::ShardCheckpoint>& from, std::vector<WholeTensor>* tensors,
                   std::vector<std::string>* notes) {
  std::vector<const PartState*> pieces;
  for (const auto& c : from)
    for (const auto& part : c.parts()) pieces.push_back(&part);
  std::sort(pieces.begin(), pieces.end(), [](const PartState* a, const PartState* b) {
    return std::make_pair(a->key(), a->offset()) < std::make_pair(b->key(), b->offset());
  });
  tensors->clear();
  std::set<uint32_t> told;
  for (const PartState* piece : pieces) {
    const uint32_t key = piece->key();
    // A key no piece names is a tensor of no elements (placement gives it
    // no part); a tensor lost whole is the next job's to refuse as another
    // model.
    const bool first_piece = key >= tensors->size();
    if (first_piece) tensors->resize(static_cast<size_t>(key) + 1);
    WholeTensor& whole = (*tensors)[key];
    const std::string what = DescribeTensor(key, piece->name());
    const uint64_t elements = piece->value().size() / sizeof(float);
    if (piece->value().size() % sizeof(float) != 0 || elements == 0)
      return Status::InvalidArgument(what + ": a piece of " +
                                     std::to_string(piece->value().size()) + " bytes");
    if (piece->offset() != whole.elements)
      return Status::InvalidArgument(
          what + ": " +
          (piece->offset() > whole.elements
               ? "elements " + std::to_string(whole.elements) + " to " +
                     std::to_string(piece->offset()) + " are in no server's checkpoint"
               : "element " + std::to_string(piece->offset()) + " is in two checkpoints"));
    for (const std::string* slot : {&piece->slot1(), &piece->slot2()}) {
      if (!slot->empty() && slot->size() != piece->value().size())
        return Status::InvalidArgument(what + ": optimizer state of " +
                                       std::to_string(slot->size()) + " bytes for " +
                                       std::to_string(piece->value().size()) + " of values");
    }
    if (first_piece) {
      whole.version = piece->version();
      whole.optimizer_steps = piece->optimizer_steps();
      whole.name = piece->name();
    } else if (piece->slot1().empty() != whole.slot1.empty() ||
               piece->slot2().empty() != whole.slot2.empty()) {
      return Status::InvalidArgument(what +
                                     ": some of its pieces hold optimizer state and "
                                     "others none");
    } else if (piece->version() != whole.version ||
               piece->optimizer_steps() != whole.optimizer_steps) {
      if (notes && told.insert(key).second) {
        notes->push_back(
            what + ": its pieces were updated " + std::to_string(whole.optimizer_steps) + " and " +
            std::to_string(piece->optimizer_steps()) + " times; it goes on counting the most");
      }
      whole.version = std::max(whole.version, piece->version());
      whole.optimizer_steps = std::max(whole.optimizer_steps, piece->optimizer_steps());
    }
    whole.value += piece->value();
    whole.slot1 += piece->slot1();
    whole.slot2 += piece->slot2();
    whole.elements += elements;
  }
  return Status::Ok();
}

std::vector<uint64_t> SizesOf(const std::vector<WholeTensor>& tensors) {
  std::vector<uint64_t> sizes;
  for (const auto& t : tensors) sizes.push_back(t.elements);
  return sizes;
}

std::string Slice(const std::string& bytes, const Part& part) {
  if (bytes.empty()) return "";
  return bytes.substr(part.offset * sizeof(float), part.length * sizeof(float));
}

}  // namespace

Status ReshardCheckpoints(const std::vector<v1::ShardCheckpoint>& from, int servers,
                          const PlacementOptions& placement, std::vector<v1::ShardCheckpoint>* to,
                          std::vector<std::string>* notes) {
  if (from.empty() || servers < 1)
    return Status::InvalidArgument(
        "resharding takes the checkpoints of at least one server "
        "into at least one");
  v1::ShardCheckpoint header;
  if (Status s = CommonHeader(from, servers, &header); !s.ok()) return s;
  std::vector<WholeTensor> tensors;
  if (Status s = PutTogether(from, &tensors, notes); !s.ok()) return s;
  to->assign(static_cast<size_t>(servers), header);
  for (const Part& part : PlaceTensors(SizesOf(tensors), servers, placement)) {
    const WholeTensor& whole = tensors[part.key];
    PartState* out = (*to)[static_cast<size_t>(part.server)].add_parts();
    out->set_key(part.key);
    out->set_offset(part.offset);
    out->set_version(whole.version);
    out->set_optimizer_steps(whole.optimizer_steps);
    out->set_name(whole.name);
    out->set_value(Slice(whole.value, part));
    out->set_slot1(Slice(whole.slot1, part));
    out->set_slot2(Slice(whole.slot2, part));
  }
  return Status::Ok();
}

bool PlacedAsBy(const std::vector<v1::ShardCheckpoint>& checkpoints, int servers,
                const PlacementOptions& placement) {
  if (checkpoints.size() != static_cast<size_t>(servers)) return false;
  std::vector<WholeTensor> tensors;
  if (!PutTogether(checkpoints, &tensors, nullptr).ok()) return false;
  using Held = std::tuple<int, uint32_t, uint64_t, uint64_t>;  // server, key, offset, length
  std::set<Held> held, placed;
  for (size_t s = 0; s < checkpoints.size(); ++s)
    for (const auto& part : checkpoints[s].parts())
      held.emplace(static_cast<int>(s), part.key(), part.offset(),
                   part.value().size() / sizeof(float));
  for (const Part& part : PlaceTensors(SizesOf(tensors), servers, placement))
    placed.emplace(part.server, part.key, part.offset, part.length);
  return held == placed;
}

namespace {

// Every "server-<i>" folder under `folder`, by rank.
Status ServerFolders(const std::string& folder, std::map<int, std::string>* dirs) {
  static const std::regex kServerFolder("server-(0|[1-9][0-9]{0,5})");
  std::error_code error;
  for (fs::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
    std::smatch match;
    const std::string name = it->path().filename().string();
    std::error_code type_error;
    if (std::regex_match(name, match, kServerFolder) && it->is_directory(type_error))
      (*dirs)[std::stoi(match[1])] = folder + "/" + name;
  }
  if (error) return Status::Error("cannot list " + folder + ": " + error.message());
  if (dirs->empty())
    return Status::NotFound("no checkpoints in " + folder + ": it holds no server-<i> folder");
  return Status::Ok();
}

// Holds each folder for this process, refusing at once where a server
// holds one: resharding under a running job would lose its checkpoints.
Status HoldAll(const std::map<int, std::string>& dirs,
               std::map<int, std::unique_ptr<CheckpointStore>>* stores) {
  const FolderHolder me = FolderHolder::ThisProcess("kubeps-reshard-" + std::to_string(::getpid()),
                                                    "kubeps reshard", "reshard");
  for (const auto& [rank, dir] : dirs) {
    std::unique_ptr<CheckpointStore> store;
    if (Status s = CheckpointStore::Open(dir, &store); !s.ok()) return s;
    StopToken give_up;
    FolderLockWait waiting;
    waiting.other_run_grace = std::chrono::seconds(0);
    waiting.on_wait = [&give_up](std::chrono::milliseconds) { give_up.RequestStop(); };
    if (Status s = store->Hold(me, &give_up, waiting); !s.ok())
      return Status::FailedPrecondition(dir + " is in use (" + s.message() +
                                        "): stop the job that runs on it first");
    (*stores)[rank] = std::move(store);
  }
  return Status::Ok();
}

// The old servers: ranks 0 to the highest whose folder holds a checkpoint
// (a run with more servers that failed at once left empty folders above).
// Their steps every one holds, newest first.
Status OldServers(const std::map<int, std::unique_ptr<CheckpointStore>>& stores, int* count,
                  std::vector<uint64_t>* common) {
  std::map<int, std::vector<uint64_t>> steps;
  *count = 0;
  for (const auto& [rank, store] : stores) {
    if (Status s = store->Steps(&steps[rank]); !s.ok()) return s;
    if (!steps[rank].empty()) *count = rank + 1;
  }
  const std::string folder = fs::path(stores.begin()->second->dir()).parent_path().string();
  if (*count == 0)
    return Status::NotFound("no checkpoints in " + folder + ": its server folders hold none");
  std::map<uint64_t, int> holders;
  std::string held;
  for (int rank = 0; rank < *count; ++rank) {
    if (!stores.count(rank))
      return Status::InvalidArgument(folder + " has no server-" + std::to_string(rank) +
                                     " folder, and server-" + std::to_string(*count - 1) +
                                     " holds checkpoints: one is missing");
    for (uint64_t step : steps[rank]) ++holders[step];
    const auto& own = steps[rank];
    held += (held.empty() ? "" : "; ") + stores.at(rank)->dir() + " holds " +
            std::to_string(own.size()) +
            (own.empty() ? " steps" : " steps up to " + std::to_string(own.back()));
  }
  for (auto it = holders.rbegin(); it != holders.rend(); ++it)
    if (it->second == *count) common->push_back(it->first);
  if (common->empty())
    return Status::FailedPrecondition("the servers hold no checkpoint step in common: " + held);
  return Status::Ok();
}

// The checkpoints of the newest common step every old server can read (a
// damaged file sends it to the step before, as a recovery would go).
Status ReadNewestReadable(const std::map<int, std::unique_ptr<CheckpointStore>>& stores, int count,
                          const std::vector<uint64_t>& common,
                          std::vector<v1::ShardCheckpoint>* from, std::vector<std::string>* notes) {
  Status first_failure;
  for (uint64_t step : common) {
    from->assign(static_cast<size_t>(count), v1::ShardCheckpoint());
    Status read;
    for (int rank = 0; rank < count && read.ok(); ++rank)
      read = stores.at(rank)->Read(step, &(*from)[static_cast<size_t>(rank)]);
    if (read.ok()) return Status::Ok();
    notes->push_back(read.message() + ": the step before is taken");
    if (first_failure.ok()) first_failure = read;
  }
  return first_failure;
}

// A name under `folder` nothing has yet.
std::string FreeName(const std::string& folder, const std::string& name) {
  std::string candidate = folder + "/" + name;
  for (int n = 2; fs::exists(candidate); ++n)
    candidate = folder + "/" + name + "-" + std::to_string(n);
  return candidate;
}

// Renames that are undone, newest first, unless kept. None replaces what is
// at its target: rename() would put a folder over an empty one.
class Moves {
 public:
  ~Moves() {
    if (kept_) return;
    std::error_code ignored;
    for (auto it = done_.rbegin(); it != done_.rend(); ++it)
      fs::rename(it->second, it->first, ignored);
  }
  Status Move(const std::string& from, const std::string& to) {
    std::error_code error;
    if (fs::exists(to, error) || error)
      return Status::AlreadyExists("cannot move " + from + " to " + to + ": it is there");
    fs::rename(from, to, error);
    if (error) return Status::Error("cannot move " + from + " to " + to + ": " + error.message());
    done_.emplace_back(from, to);
    return Status::Ok();
  }
  void Keep() { kept_ = true; }

 private:
  std::vector<std::pair<std::string, std::string>> done_;
  bool kept_ = false;
};

// The run the old folders' checkpoints belong to ("<dir>/run",
// CheckpointStore::ClaimForRun), where they all say the same: "" otherwise.
std::string RunOfAll(const std::map<int, std::unique_ptr<CheckpointStore>>& stores, int count) {
  std::string run;
  for (int rank = 0; rank < count; ++rank) {
    std::string recorded;
    if (!ReadWholeFile(stores.at(rank)->dir() + "/run", &recorded).ok()) return "";
    if (rank > 0 && recorded != run) return "";
    run = recorded;
  }
  return run;
}

// What a reshard moves, kept in the folder while it moves it
// (kReshardJournal), each name relative to the folder: the volume may be
// mounted elsewhere when the next reshard finishes the moves.
struct Journal {
  std::string staging;      // the new server folders, all written
  std::string moved_aside;  // where the old ones go
  int servers = 0;          // how many new ones
  int old_servers = 0;
  uint64_t step = 0;
};

std::string JournalPath(const std::string& folder) { return folder + "/" + kReshardJournal; }

Status WriteJournal(const std::string& folder, const Journal& j) {
  return ReplaceDurably(folder, JournalPath(folder),
                        "staging " + j.staging + "\nmoved-aside " + j.moved_aside + "\nservers " +
                            std::to_string(j.servers) + "\nold-servers " +
                            std::to_string(j.old_servers) + "\nstep " + std::to_string(j.step) +
                            "\n");
}

Status ReadJournal(const std::string& folder, Journal* j) {
  std::string text;
  if (Status s = ReadWholeFile(JournalPath(folder), &text); !s.ok()) return s;
  std::istringstream lines(text);
  std::string key;
  while (lines >> key) {
    if (key == "staging")
      lines >> j->staging;
    else if (key == "moved-aside")
      lines >> j->moved_aside;
    else if (key == "servers")
      lines >> j->servers;
    else if (key == "old-servers")
      lines >> j->old_servers;
    else if (key == "step")
      lines >> j->step;
    else
      break;
  }
  const auto named = [](const std::string& name) {
    return !name.empty() && name.find('/') == std::string::npos && name != "." && name != "..";
  };
  if (!lines.eof() || !named(j->staging) || !named(j->moved_aside) || j->servers < 1)
    return Status::InvalidArgument(JournalPath(folder) + " is not a reshard's journal: " + text);
  return Status::Ok();
}

// Moves every old server folder aside and every new one in (each move
// after the one before it was made, `after_each_move` then called): undone
// where one fails.
Status MoveFolders(const std::string& folder, const std::map<int, std::string>& old_dirs,
                   const Journal& j, const std::function<void()>& after_each_move) {
  Moves moves;  // undone unless every one is made
  auto move = [&](const std::string& from, const std::string& to) {
    Status s = moves.Move(from, to);
    if (s.ok() && after_each_move) after_each_move();
    return s;
  };
  for (const auto& [rank, dir] : old_dirs)
    if (Status s = move(dir, folder + "/" + j.moved_aside + dir.substr(folder.size())); !s.ok())
      return s;
  for (int n = 0; n < j.servers; ++n) {
    const std::string name = "/server-" + std::to_string(n);
    if (Status s = move(folder + "/" + j.staging + name, folder + name); !s.ok()) return s;
  }
  moves.Keep();
  return Status::Ok();
}

// Flushes the moves, then drops the journal and the staging folder. The
// folder is flushed twice: the moves must be on the disk before the
// journal's removal can be, and the removal after it, or the servers would
// refuse the folder after a crash of the node until a reshard ran again.
void EndMoves(const std::string& folder, const Journal& j, ReshardReport* report) {
  for (const std::string& moved : {folder + "/" + j.moved_aside, folder})
    if (const int error = SyncFolder(moved); error != 0)
      report->notes.push_back("the moves in " + moved +
                              " may not survive a crash of the node: " + std::strerror(error));
  std::error_code ignored;
  fs::remove(JournalPath(folder), ignored);
  SyncFolder(folder);
  fs::remove_all(folder + "/" + j.staging, ignored);
}

// Makes the moves a reshard killed between two of them left undone. Old
// folders are all moved aside before any new one is moved in: while the
// staging folder holds every new one, each server folder in place is old.
Status FinishMoves(const std::string& folder, ReshardReport* report) {
  Journal j;
  if (Status s = ReadJournal(folder, &j); !s.ok()) return s;
  std::map<int, std::string> in_place;
  std::map<int, std::unique_ptr<CheckpointStore>> held;
  if (Status s = ServerFolders(folder, &in_place); !s.ok() && !s.IsNotFound()) return s;
  if (Status s = HoldAll(in_place, &held); !s.ok()) return s;
  const std::string staging = folder + "/" + j.staging, aside = folder + "/" + j.moved_aside;
  bool none_moved_in = true;
  for (int n = 0; n < j.servers; ++n)
    none_moved_in = none_moved_in && fs::is_directory(staging + "/server-" + std::to_string(n));
  std::error_code error;
  fs::create_directory(aside, error);
  Moves moves;
  moves.Keep();  // a finish goes forward: each move it makes is one the journal asked for
  if (none_moved_in) {
    for (const auto& [rank, dir] : in_place)
      if (Status s = moves.Move(dir, aside + dir.substr(folder.size())); !s.ok()) return s;
  }
  for (int n = 0; n < j.servers; ++n) {
    const std::string name = "/server-" + std::to_string(n);
    if (fs::is_directory(staging + name)) {
      if (Status s = moves.Move(staging + name, folder + name); !s.ok()) return s;
    }
  }
  EndMoves(folder, j, report);
  report->old_servers = j.old_servers;
  report->moved_aside = aside;
  report->notes.push_back("finished the reshard of step " + std::to_string(j.step) + " for " +
                          std::to_string(j.servers) +
                          " servers that was stopped between its moves");
  return Status::Ok();
}

// The reshard itself, once no earlier one is halfway.
Status ReshardFolderNow(const std::string& folder, int servers, const PlacementOptions& placement,
                        ReshardReport* report, const std::function<void()>& after_each_move) {
  std::map<int, std::string> dirs;
  if (Status s = ServerFolders(folder, &dirs); !s.ok()) return s;
  std::map<int, std::unique_ptr<CheckpointStore>> stores;
  if (Status s = HoldAll(dirs, &stores); !s.ok()) return s;
  int count = 0;
  std::vector<uint64_t> common;
  if (Status s = OldServers(stores, &count, &common); !s.ok()) return s;
  *report = ReshardReport{0, count, 0, 0, "", {}};
  std::vector<v1::ShardCheckpoint> from;
  if (Status s = ReadNewestReadable(stores, count, common, &from, &report->notes); !s.ok())
    return s;
  report->step = from.front().step();
  std::vector<v1::ShardCheckpoint> to;
  if (Status s = ReshardCheckpoints(from, servers, placement, &to, &report->notes); !s.ok())
    return s.Prefixed("the checkpoints of step " + std::to_string(report->step) + " in " + folder +
                      " cannot be resharded: ");
  for (const auto& c : to) {
    for (const auto& part : c.parts()) {
      report->tensors += part.offset() == 0 ? 1 : 0;
      report->bytes += part.value().size() + part.slot1().size() + part.slot2().size();
    }
  }
  if (PlacedAsBy(from, servers, placement)) return Status::Ok();

  // Written whole beside the old folders first: a reshard killed here
  // leaves them as they were (and its staging folder, which the next one
  // replaces).
  const std::string staging = folder + "/.reshard-step-" + std::to_string(report->step);
  std::error_code error;
  fs::remove_all(staging, error);
  const std::string run = RunOfAll(stores, count);
  for (int j = 0; j < servers; ++j) {
    const std::string dir = staging + "/server-" + std::to_string(j);
    std::unique_ptr<CheckpointStore> store;
    if (Status s = CheckpointStore::Open(dir, &store); !s.ok()) return s;
    if (Status s = store->Write(to[static_cast<size_t>(j)]); !s.ok()) return s;
    if (!run.empty()) {
      if (Status s = ReplaceDurably(dir, dir + "/run", run); !s.ok()) return s;
    }
  }
  report->moved_aside = FreeName(folder, "before-reshard-" + std::to_string(count) +
                                             "-servers-step-" + std::to_string(report->step));
  fs::create_directory(report->moved_aside, error);
  if (error) return Status::Error("cannot make " + report->moved_aside + ": " + error.message());
  // From the journal on, a reshard killed between two moves is finished by
  // the next, and no server takes the folder meanwhile.
  const Journal journal{staging.substr(folder.size() + 1),
                        report->moved_aside.substr(folder.size() + 1), servers, count,
                        report->step};
  if (Status s = WriteJournal(folder, journal); !s.ok()) return s;
  if (Status s = MoveFolders(folder, dirs, journal, after_each_move); !s.ok()) {
    std::error_code ignored;
    fs::remove(JournalPath(folder), ignored);
    return s;
  }
  EndMoves(folder, journal, report);
  return Status::Ok();
}

}  // namespace

Status ReshardFolder(const std::string& folder, int servers, const PlacementOptions& placement,
                     ReshardReport* report, const std::function<void()>& after_each_move) {
  ReshardReport finished;
  if (fs::exists(JournalPath(folder))) {
    if (Status s = FinishMoves(folder, &finished); !s.ok())
      return s.Prefixed("the reshard that was stopped between its moves cannot be finished: ");
  }
  if (Status s = ReshardFolderNow(folder, servers, placement, report, after_each_move); !s.ok())
    return s;
  if (!finished.moved_aside.empty()) {
    report->notes.insert(report->notes.begin(), finished.notes.begin(), finished.notes.end());
    if (report->moved_aside.empty()) {
      report->moved_aside = finished.moved_aside;
      report->old_servers = finished.old_servers;
    }
  }
  return Status::Ok();
}

}  // namespace kubeps::tools
